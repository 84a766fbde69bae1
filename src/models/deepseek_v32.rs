//! DeepSeek-V3.2 and GLM-5 (`glm_moe_dsa`): DeepSeek-V3's multi-head latent attention and
//! experts ([`super::deepseek`]) made sparse by DeepSeek Sparse Attention: in each layer a learned
//! indexer ([`Indexer`], module `self_attn.indexer`) scores every key from the MLA's q latent and
//! the hidden state, and the attention sees only the `index_topk` best ([`super::components::indexer`]).
//! The indexer's keys are carried beside the KV cache (`past_key_values.{i}.index_key`), a cache
//! onnxruntime-genai 0.18's decoder does not carry: the packages have no genai_config.json. The
//! index mask is an additive mask, so the attention stays opset-24 `Attention` (no
//! GroupQueryAttention). DeepSeek-V3.2's indexer rotates the two halves of its rope channels,
//! GLM-5's interleaved pairs; GLM-5's `indexer_types` (or `index_topk_pattern`, or
//! `index_topk_freq` from `index_skip_topk_offset`) lets a `shared` layer reuse the previous
//! `full` layer's selection (no indexer, no index-key cache). The MLP of each layer follows
//! `mlp_layer_types` (default: `first_k_dense_replace` dense layers, then experts).

use super::components::{AttentionSpec, IndexedLayer, Indexer, Mla, RopeTables};
use super::decoder::Family;
use super::deepseek::{
    mla_rope, read_mla_decoder, sigmoid_router, Deepseek, DeepseekExperts, DeepseekMoe, MlaDefaults,
};
use super::family::FamilySpec;
use crate::config::{
    read_sparse_layers, ArchConfig, Biases, DecoderFields, Fields, HfConfig, ModelType,
};
use crate::ir::{DType, GraphBuilder};
use crate::limits::config::{MAX_LAYERS, MAX_WIDTH};
use crate::Result;
use serde_json::Value;

/// The family's registry entry.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "deepseek_v32",
    summary: "DeepSeek Sparse Attention: DeepSeek-V3's multi-head latent attention and experts, \
              each query attending to the `index_topk` keys a learned indexer picks (its keys \
              cached as `past_key_values.{i}.index_key`; Attention with the index mask, no \
              GroupQueryAttention, no genai_config); glm_moe_dsa: interleaved indexer RoPE, \
              layers sharing an earlier layer's selection (`indexer_types`)",
    model_types: &[
        ModelType {
            name: "deepseek_v32",
            genai_type: None,
            read: read_v32,
            builds_longrope: false,
        },
        ModelType {
            name: "glm_moe_dsa",
            genai_type: None,
            read: read_glm,
            builds_longrope: false,
        },
    ],
};

/// What sets the two config classes apart.
struct Defaults {
    /// `rms_norm_eps` and the Llama-like fields.
    fields: DecoderFields,
    /// The MLA shape.
    mla: MlaDefaults,
    /// `(n_group, topk_group)`.
    groups: (usize, usize),
    /// `index_n_heads`.
    index_heads: usize,
    /// Whether the indexer's rope channels are interleaved pairs.
    interleaved: bool,
}

/// transformers' DeepseekV32Config.
const V32: Defaults = Defaults {
    fields: DecoderFields {
        biases: Biases::Configured { mlp_bias: false },
        rope: |raw, _, f| mla_rope(raw, 64, true, f),
        ..DecoderFields::LLAMA
    },
    mla: (Some(1536), 512, 128, 64, Some(128)),
    groups: (8, 4),
    index_heads: 64,
    interleaved: false,
};

/// transformers' GlmMoeDsaConfig.
const GLM: Defaults = Defaults {
    fields: DecoderFields {
        biases: Biases::Configured { mlp_bias: false },
        rope: |raw, _, f| mla_rope(raw, 64, true, f),
        rms_norm_eps: 1e-5,
        ..DecoderFields::LLAMA
    },
    mla: (Some(2048), 512, 192, 64, Some(256)),
    groups: (1, 1),
    index_heads: 32,
    interleaved: true,
};

fn read_v32(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    read(raw, t, f, &V32)
}

fn read_glm(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    read(raw, t, f, &GLM)
}

/// transformers writes every layer `indexed_attention` (no sliding window): any other
/// `layer_types` entry is refused by name.
pub(super) fn every_layer_indexed(raw: &HfConfig, f: &Fields<'_>) -> Result<()> {
    match raw
        .layer_types
        .iter()
        .flatten()
        .find(|t| *t != "indexed_attention")
    {
        None => Ok(()),
        Some(other) => Err(f.err(
            "layer_types",
            &format!("`{other}` (expected indexed_attention: every layer is sparse)"),
        )),
    }
}

/// The lightning indexer of an MLA config: `index_n_heads` (default `heads`), `index_head_dim`
/// (128), `index_topk` (2048), RoPE on the attention's `qk_rope_head_dim` channels (pairs
/// `interleaved` or halves); the q latent it reads needs `q_lora_rank` (`reads_q` says who reads
/// it, for the error).
pub(super) fn read_indexer(
    raw: &HfConfig,
    f: &Fields<'_>,
    mla: &Mla,
    (heads, interleaved): (usize, bool),
    reads_q: &str,
) -> Result<Indexer> {
    let Some(q_rank) = mla.q_lora_rank else {
        return Err(f.err("q_lora_rank", &format!("null ({reads_q}: expected a rank)")));
    };
    let width = |field: &str, v: Option<i64>, default: usize| {
        f.optional_count(field, v, default, MAX_WIDTH)
    };
    let indexer = Indexer {
        hidden: mla.hidden,
        q_rank,
        heads: width("index_n_heads", raw.index_n_heads, heads)?,
        head_dim: width("index_head_dim", raw.index_head_dim, 128)?,
        rope_dim: mla.qk_rope,
        interleaved,
        topk: f.optional_count("index_topk", raw.index_topk, 2048, usize::MAX)?,
    };
    if indexer.rope_dim > indexer.head_dim {
        return Err(f.err(
            "index_head_dim",
            &format!(
                "{} (the indexer rotates qk_rope_head_dim = {} of its channels)",
                indexer.head_dim, indexer.rope_dim
            ),
        ));
    }
    Ok(indexer)
}

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>, d: &Defaults) -> Result<ArchConfig> {
    every_layer_indexed(raw, f)?;
    let raw = &HfConfig {
        layer_types: None,
        ..raw.clone()
    };
    read_mla_decoder(raw, t, f, &d.fields, d.mla, |mla| {
        let layers = f.positive("num_hidden_layers", raw.num_hidden_layers, MAX_LAYERS)?;
        let mut experts = DeepseekExperts::read(raw, f, (256, Some(8)), 2048, 1, 3)?;
        if let Some(types) = &raw.mlp_layer_types {
            experts.moe_layers = read_sparse_layers(types, layers, f)?;
        }
        let router = sigmoid_router(raw, f, experts.experts, d.groups, (true, 2.5))?;
        let reads_q = "the sparse attention's indexer reads the q latent";
        let indexer = read_indexer(raw, f, &mla, (d.index_heads, d.interleaved), reads_q)?;
        let owners = match d.interleaved {
            false => (0..layers).collect(),
            true => indexer_owners(raw, layers, f)?,
        };
        Ok(DeepseekV32 {
            deepseek: Deepseek {
                mla,
                moe: DeepseekMoe { experts, router },
            },
            indexer,
            owners,
        })
    })
}

/// Per layer, the layer whose indexer selects its keys (itself for a `full` layer, the last
/// `full` layer before it for a `shared` one), from GLM-5's `indexer_types`, else
/// `index_topk_pattern` (`F`/`S` per layer, or a list of the names), else `index_topk_freq`
/// (default 1: every layer full) counted from `index_skip_topk_offset` (default 2), as
/// GlmMoeDsaConfig derives them.
fn indexer_owners(raw: &HfConfig, layers: usize, f: &Fields<'_>) -> Result<Vec<usize>> {
    let (field, types): (&str, Vec<String>) = match (&raw.indexer_types, &raw.index_topk_pattern) {
        (Some(types), _) => ("indexer_types", types.clone()),
        (None, Some(Value::String(p))) => {
            let letters = p.chars().map(|c| match c {
                'F' => Ok("full".to_string()),
                'S' => Ok("shared".to_string()),
                other => Err(f.err(
                    "index_topk_pattern",
                    &format!("`{other}` (expected F or S per layer)"),
                )),
            });
            ("index_topk_pattern", letters.collect::<Result<_>>()?)
        }
        (None, Some(Value::Array(p))) => {
            let names = p.iter().map(|v| match v.as_str() {
                Some(s) => Ok(s.to_string()),
                None => Err(f.err("index_topk_pattern", "expected strings")),
            });
            ("index_topk_pattern", names.collect::<Result<_>>()?)
        }
        (None, Some(other)) => {
            return Err(f.err(
                "index_topk_pattern",
                &format!("{other} (expected a string or a list)"),
            ))
        }
        (None, None) => {
            let freq = raw.index_topk_freq.unwrap_or(1).max(1);
            let offset = raw.index_skip_topk_offset.unwrap_or(2);
            let types = (0..layers as i64).map(|i| match (i - offset + 1).max(0) % freq {
                0 => "full".to_string(),
                _ => "shared".to_string(),
            });
            ("index_topk_freq", types.collect())
        }
    };
    if types.len() != layers {
        return Err(f.err(
            field,
            &format!(
                "has {} entries, expected num_hidden_layers = {layers}",
                types.len()
            ),
        ));
    }
    let mut owners = Vec::with_capacity(layers);
    for (i, t) in types.iter().enumerate() {
        match (t.as_str(), owners.last()) {
            ("full", _) => owners.push(i),
            ("shared", Some(&previous)) => owners.push(previous),
            ("shared", None) => {
                return Err(f.err(
                    field,
                    "starts with a shared layer (it reuses an earlier full layer's selection)",
                ))
            }
            (other, _) => return Err(f.err(field, &format!("`{other}` (expected full or shared)"))),
        }
    }
    Ok(owners)
}

/// The family's knobs and hooks.
#[derive(Debug, Clone, PartialEq)]
pub struct DeepseekV32 {
    /// The attention's shape and the experts, as DeepSeek-V3's.
    pub deepseek: Deepseek,
    /// Every indexer's shape.
    pub indexer: Indexer,
    /// Per layer, the layer whose indexer selects its keys (itself where it has one).
    pub owners: Vec<usize>,
}

impl Family for DeepseekV32 {
    fn layer_indexer(&self, _cfg: &ArchConfig, i: usize) -> Option<IndexedLayer> {
        Some(match self.owners[i] {
            owner if owner == i => IndexedLayer::Own(self.indexer),
            owner => IndexedLayer::Shared(owner),
        })
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
        let mla = &self.deepseek.mla;
        let (qkv, latent) = mla.qkv_and_latent(b, x, attn, &rotary[0], &cfg.rope, dtype);
        if let Some(io) = &spec.index {
            let latent = latent.expect("the config reader requires q_lora_rank");
            let module = format!("{attn}.indexer");
            let rope = (&rotary[0], &cfg.rope);
            self.indexer
                .mask(b, x, &latent, &module, rope, io, spec.mask, dtype);
        }
        qkv
    }

    fn attention_scale(&self, cfg: &ArchConfig) -> f32 {
        self.deepseek.attention_scale(cfg)
    }

    fn o_proj(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        y: &str,
        attn: &str,
        dtype: DType,
    ) -> String {
        self.deepseek.o_proj(b, cfg, y, attn, dtype)
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
        self.deepseek.layer_mlp(b, cfg, x, layer, i, dtype)
    }
}

#[cfg(test)]
mod tests {
    use super::DeepseekV32;
    use crate::config::ArchConfig;

    fn parse(model_type: &str, extra: &str) -> crate::Result<ArchConfig> {
        let fields = format!(
            r#""model_type": "{model_type}", "hidden_size": 64, "intermediate_size": 128,
            "num_attention_heads": 4, "num_hidden_layers": 4, "vocab_size": 300,
            "max_position_embeddings": 128, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8,
            "v_head_dim": 16, "kv_lora_rank": 32, "q_lora_rank": 48, "n_routed_experts": 16"#
        );
        crate::models::parse_fields(&fields, extra)
    }

    #[test]
    fn v32_defaults_follow_transformers() {
        let c = parse("deepseek_v32", "").unwrap();
        let k = c.knobs::<DeepseekV32>().unwrap();
        assert_eq!(
            (k.indexer.heads, k.indexer.head_dim, k.indexer.topk),
            (64, 128, 2048)
        );
        assert_eq!((k.indexer.rope_dim, k.indexer.interleaved), (8, false));
        assert_eq!(k.owners, [0, 1, 2, 3]);
        assert_eq!(
            k.deepseek.moe.experts.moe_layers,
            [false, false, false, true]
        );
        assert_eq!(
            (
                k.deepseek.moe.router.groups,
                k.deepseek.moe.router.top_groups
            ),
            (8, 4)
        );
        assert!(c.rope.interleaved);
        assert_eq!(c.rms_norm_eps, 1e-6);
    }

    #[test]
    fn glm_reads_which_layers_share_a_selection() {
        let owners = |extra: &str| {
            let c = parse("glm_moe_dsa", extra).unwrap();
            c.knobs::<DeepseekV32>().unwrap().owners.clone()
        };
        assert_eq!(owners(""), [0, 1, 2, 3]);
        assert_eq!(owners(r#", "index_topk_freq": 2"#), [0, 1, 1, 3]);
        assert_eq!(owners(r#", "index_topk_pattern": "FSSF""#), [0, 0, 0, 3]);
        let types = r#", "indexer_types": ["full", "shared", "full", "shared"]"#;
        assert_eq!(owners(types), [0, 0, 2, 2]);
        let k = parse("glm_moe_dsa", "").unwrap();
        let k = k.knobs::<DeepseekV32>().unwrap();
        assert_eq!((k.indexer.heads, k.indexer.interleaved), (32, true));
        for (extra, field) in [
            (r#", "index_topk_pattern": "SFFF""#, "index_topk_pattern"),
            (r#", "indexer_types": ["full"]"#, "indexer_types"),
            (r#", "index_head_dim": 4"#, "index_head_dim"),
            (r#", "q_lora_rank": null"#, "q_lora_rank"),
        ] {
            let err = parse("glm_moe_dsa", extra).unwrap_err().to_string();
            assert!(err.contains(field), "{extra}: {err}");
        }
    }
}
