//! LongCat-Flash: each of the `num_layers` layers holds two pre-norm sublayers, each an MLA
//! attention block ([`Mla`], DeepSeek-V3's with the LoRA scales `√(hidden / q_lora_rank)` on q
//! and `√(hidden / kv_lora_rank)` on the normalised latent) then a dense SwiGLU MLP
//! (`mlps.{j}`), plus a shortcut mixture of experts (`mlp`) that reads the first sublayer's MLP
//! input and is added to the layer's output after the second MLP. The router scores
//! `n_routed_experts + zero_expert_num` choices (softmax of `router.classifier`, the top-k
//! picked on the scores plus `e_score_correction_bias`, weighted by the scores times
//! `routed_scaling_factor`); the zero experts are identities ([`MoeSpec::zero_experts`]).
//!
//! The graph is the decoder skeleton over the `2 · num_layers` sublayers (transformers'
//! `num_hidden_layers`): sublayer `2i + j` is attention `j` and MLP `j` of layer `i`, with KV
//! cache `past_key_values.{2i + j}` as transformers' cache indexes them, so onnxruntime-genai's
//! generic `decoder` runs it (its `num_hidden_layers` is the cache count). The checkpoint's
//! names are mapped onto the sublayers ([`checkpoint_name`]); the MoE is built in the even
//! sublayer (module `….layers.{2i}.moe`) and its output joins the odd one's residual add.

use super::components::{
    AttentionSpec, ExpertNames, ExpertWeights, GroupScore, GroupedRouter, Mla, MoeSpec, RopeTables,
    Router,
};
use super::decoder::{Block, Family};
use super::deepseek::read_mla_decoder;
use super::family::FamilySpec;
use crate::config::{
    read_rope, ArchConfig, Biases, CheckpointRenaming, DecoderFields, Fields, HfConfig, ModelType,
    Rope, Sign,
};
use crate::ir::{DType, GraphBuilder};
use crate::limits::config::{MAX_EXPERTS, MAX_LAYERS, MAX_WIDTH};
use crate::Result;

/// The family's registry entry.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "longcat_flash",
    summary: "two MLA sublayers per layer (LoRA-scaled q and latent), each with a dense \
              SwiGLU MLP, plus a shortcut MoE from the first MLP's input added after the \
              second: softmax router with `e_score_correction_bias` over experts and zero \
              (identity) experts, `routed_scaling_factor`; one KV cache per sublayer",
    model_types: &[ModelType::generative("longcat_flash", "decoder", read)],
};

/// transformers' LongcatFlashConfig: no MLP bias, `attention_bias` on the attention's
/// projections, RoPE theta 1e7, untied, RMSNorm epsilon 1e-5.
const FIELDS: DecoderFields = DecoderFields {
    biases: Biases::Configured { mlp_bias: false },
    rope,
    rms_norm_eps: 1e-5,
    ..DecoderFields::LLAMA
};

/// LongCat's RoPE: `qk_rope_head_dim` channels (64 by default), pairs interleaved, theta 1e7
/// by default.
fn rope(raw: &HfConfig, _head_dim: usize, f: &Fields<'_>) -> Result<Rope> {
    let width = f.optional_count("qk_rope_head_dim", raw.qk_rope_head_dim, 64, MAX_WIDTH)?;
    let rope = read_rope(raw, width, 1e7, f)?;
    Ok(Rope {
        interleaved: true,
        ..rope
    })
}

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    let layers = match (raw.num_layers, raw.num_hidden_layers) {
        (Some(n), _) => f.count("num_layers", n, MAX_LAYERS / 2)?,
        (None, Some(n)) => f.count("num_hidden_layers", n, MAX_LAYERS)? / 2,
        (None, None) => 28,
    };
    if layers == 0 {
        return Err(f.err("num_hidden_layers", "1 (expected two sublayers per layer)"));
    }
    let nope = f.optional_count("qk_nope_head_dim", raw.qk_nope_head_dim, 128, MAX_WIDTH)?;
    let rope = f.optional_count("qk_rope_head_dim", raw.qk_rope_head_dim, 64, MAX_WIDTH)?;
    if let Some(d) = raw.qk_head_dim {
        if d != (nope + rope) as i64 {
            return Err(f.err(
                "qk_head_dim",
                &format!(
                    "{d} (expected qk_nope_head_dim + qk_rope_head_dim = {})",
                    nope + rope
                ),
            ));
        }
    }
    // transformers' rotary tables are `head_dim` wide and rotate the `qk_rope_head_dim`
    // channels: the two must agree.
    let head_dim = f.optional_count("head_dim", raw.head_dim, 64, MAX_WIDTH)?;
    if head_dim != rope {
        return Err(f.err(
            "head_dim",
            &format!("{head_dim} (the RoPE width: expected qk_rope_head_dim = {rope})"),
        ));
    }
    let experts = f.optional_count(
        "n_routed_experts",
        raw.n_routed_experts.or(raw.num_local_experts),
        512,
        MAX_EXPERTS,
    )?;
    let zero = match raw.zero_expert_num {
        Some(Some(n)) => f.index("zero_expert_num", n, MAX_EXPERTS)?,
        Some(None) => 0,
        None => 256,
    };
    let top_k = match (
        f.json_integer("moe_topk", raw.moe_topk.as_ref())?,
        raw.num_experts_per_tok,
    ) {
        (Some(k), _) | (None, Some(k)) => f.count("moe_topk", k, MAX_EXPERTS)?,
        (None, None) => 12,
    };
    if top_k > experts + zero {
        return Err(f.err(
            "moe_topk",
            &format!(
                "{top_k} is more than the {} experts and zero experts",
                experts + zero
            ),
        ));
    }
    let width = f.optional_count(
        "expert_ffn_hidden_size",
        raw.expert_ffn_hidden_size.or(raw.moe_intermediate_size),
        2048,
        MAX_WIDTH,
    )?;
    let scale = f.number(
        "routed_scaling_factor",
        raw.routed_scaling_factor,
        6.0,
        Sign::Positive,
    )?;
    let ffn = f.optional_count(
        "ffn_hidden_size",
        raw.ffn_hidden_size.or(raw.intermediate_size),
        12288,
        MAX_WIDTH,
    )?;
    let raw = &HfConfig {
        num_hidden_layers: Some(2 * layers as i64),
        intermediate_size: Some(ffn as i64),
        ..raw.clone()
    };
    read_mla_decoder(
        raw,
        t,
        f,
        &FIELDS,
        (Some(1536), 512, 128, 64, Some(128)),
        |mla| {
            let Some(q_rank) = mla.q_lora_rank else {
                return Err(f.err(
                    "q_lora_rank",
                    "null (LongCat-Flash always projects q low-rank)",
                ));
            };
            let hidden = mla.hidden as f64;
            let q_scale = (hidden / q_rank as f64).sqrt();
            let latent_scale = (hidden / mla.kv_lora_rank as f64).sqrt() as f32;
            Ok(LongcatFlash {
                mla: Mla {
                    latent_scale,
                    ..mla
                },
                q_scale: q_scale as f32,
                experts,
                zero_experts: zero,
                top_k,
                width,
                scale,
            })
        },
    )
}

/// Maps LongCat-Flash's checkpoint names onto the sublayers the graph is built from: layer
/// `i`'s `self_attn.{j}.*`, `input_layernorm.{j}`, `post_attention_layernorm.{j}` and
/// `mlps.{j}.*` become sublayer `2i + j`'s `self_attn.*`, `input_layernorm`,
/// `post_attention_layernorm` and `mlp.*`; the MoE (`mlp.*`) becomes sublayer `2i`'s `moe.*`;
/// the multi-token-prediction layers (`model.mtp.*`) are never read.
pub fn checkpoint_name(name: &str) -> Option<String> {
    if name.starts_with("model.mtp.") {
        return None;
    }
    let Some(rest) = name.strip_prefix("model.layers.") else {
        return Some(name.to_string());
    };
    let (layer, rest) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    for module in [
        "self_attn",
        "input_layernorm",
        "post_attention_layernorm",
        "mlps",
    ] {
        if let Some(tail) = rest.strip_prefix(module).and_then(|t| t.strip_prefix('.')) {
            let (j, tail) = tail.split_once('.')?;
            let j: usize = j.parse().ok().filter(|&j| j < 2)?;
            let module = if module == "mlps" { "mlp" } else { module };
            return Some(format!("model.layers.{}.{module}.{tail}", 2 * layer + j));
        }
    }
    match rest.strip_prefix("mlp.") {
        // transformers' router never adds `router.classifier.bias` (`router_bias`).
        Some("router.classifier.bias") => None,
        Some(tail) => {
            let tail = tail.replace("router.classifier.", "router.");
            Some(format!("model.layers.{}.moe.{tail}", 2 * layer))
        }
        None => Some(name.to_string()),
    }
}

/// The shortcut MoE's weights (after [`checkpoint_name`]): router `router.weight`, one tensor
/// per expert and projection, `experts.{e}.{gate,up,down}_proj.weight`, as transformers saves
/// them.
const EXPERTS: ExpertWeights = ExpertWeights::PerExpert(ExpertNames {
    router: "router",
    ..ExpertNames::PROJ
});

/// LongCat-Flash's knobs.
#[derive(Debug, Clone, PartialEq)]
pub struct LongcatFlash {
    /// Each attention sublayer's shape (the latent scaled by `mla_scale_kv_lora`).
    pub mla: Mla,
    /// `mla_scale_q_lora`, `√(hidden_size / q_lora_rank)`: folded into the softmax scale (q
    /// is linear in it, RoPE included).
    pub q_scale: f32,
    /// `n_routed_experts`.
    pub experts: usize,
    /// `zero_expert_num`: the identity experts.
    pub zero_experts: usize,
    /// `moe_topk`.
    pub top_k: usize,
    /// `expert_ffn_hidden_size`: each routed expert's width.
    pub width: usize,
    /// `routed_scaling_factor`.
    pub scale: f32,
}

impl LongcatFlash {
    /// The name of the shortcut MoE's output of the layer whose first sublayer is `layer`.
    fn shortcut(layer: &str) -> String {
        format!("{layer}.moe.shortcut")
    }

    /// The module of the first sublayer of sublayer `i`'s layer (sublayer `i` is module
    /// `….layers.{i}`).
    fn first_sublayer(sublayer: &str, i: usize) -> String {
        let root = sublayer.rsplit_once('.').map_or("", |(root, _)| root);
        format!("{root}.{}", i - i % 2)
    }
}

impl Family for LongcatFlash {
    fn checkpoint_renaming(&self) -> Option<CheckpointRenaming> {
        Some(checkpoint_name)
    }

    fn attention_qkv(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        attn: &str,
        _i: usize,
        rotary: &[RopeTables],
        _spec: &AttentionSpec<'_>,
        dtype: DType,
    ) -> [String; 3] {
        self.mla.qkv(b, x, attn, &rotary[0], &cfg.rope, dtype)
    }

    fn attention_scale(&self, _cfg: &ArchConfig) -> f32 {
        self.mla.scale * self.q_scale
    }

    fn o_proj(
        &self,
        b: &mut GraphBuilder,
        _cfg: &ArchConfig,
        y: &str,
        attn: &str,
        dtype: DType,
    ) -> String {
        self.mla.output(b, y, attn, dtype)
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
        if i % 2 == 0 {
            let router = Router::Grouped(GroupedRouter {
                sigmoid: false,
                correction_bias: true,
                groups: 1,
                top_groups: 1,
                group_score: GroupScore::TopTwoSum,
                normalize: false,
                scale: self.scale,
            });
            let routing = (self.experts, self.top_k);
            let spec = MoeSpec::new(cfg, self.width, routing, router, EXPERTS)
                .with_zero_experts(self.zero_experts);
            let moe = spec.build(b, x, &format!("{layer}.moe"), dtype);
            b.op_into("Identity", &[&moe], vec![], &Self::shortcut(layer));
        }
        self.mlp(b, cfg, x, &format!("{layer}.mlp"), dtype)
    }

    fn residual_add(
        &self,
        b: &mut GraphBuilder,
        _cfg: &ArchConfig,
        x: &str,
        y: &str,
        (layer, i): (&str, usize),
        block: Block,
        _dtype: DType,
    ) -> String {
        let sum = b.op("Add", &[x, y], vec![]);
        match (block, i % 2) {
            (Block::Mlp, 1) => {
                let shortcut = Self::shortcut(&Self::first_sublayer(layer, i));
                b.op("Add", &[&sum, &shortcut], vec![])
            }
            _ => sum,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{checkpoint_name, LongcatFlash};
    use crate::config::ArchConfig;

    fn parse(extra: &str) -> crate::Result<ArchConfig> {
        let fields = r#""model_type": "longcat_flash", "hidden_size": 64, "num_layers": 3,
            "num_attention_heads": 4, "vocab_size": 300, "max_position_embeddings": 128,
            "q_lora_rank": 16, "kv_lora_rank": 32, "qk_nope_head_dim": 16,
            "qk_rope_head_dim": 8, "head_dim": 8, "v_head_dim": 16, "n_routed_experts": 8"#;
        crate::models::parse_fields(fields, extra)
    }

    #[test]
    fn reads_sublayers_scales_and_defaults() {
        let c = parse("").unwrap();
        let k = c.knobs::<LongcatFlash>().unwrap();
        assert_eq!(
            (c.num_hidden_layers, c.head_dim, c.intermediate_size),
            (6, 24, 12288)
        );
        assert_eq!((c.rope.rotary_dim, c.rope.interleaved), (8, true));
        assert_eq!((c.rope.theta, c.rms_norm_eps), (1e7, 1e-5));
        assert_eq!(
            (k.zero_experts, k.top_k, k.width, k.scale),
            (256, 12, 2048, 6.0)
        );
        assert_eq!(k.q_scale, 2.0);
        assert_eq!(k.mla.latent_scale, 2f64.sqrt() as f32);
        assert_eq!(k.mla.scale, (24f64.powf(-0.5)) as f32);
    }

    #[test]
    fn refuses_what_transformers_cannot_run() {
        for (extra, field) in [
            (r#", "head_dim": 16"#, "head_dim"),
            (r#", "qk_head_dim": 30"#, "qk_head_dim"),
            (r#", "q_lora_rank": null"#, "q_lora_rank"),
            (r#", "moe_topk": 300, "zero_expert_num": 0"#, "moe_topk"),
            (r#", "num_key_value_heads": 2"#, "num_key_value_heads"),
        ] {
            let err = parse(extra).unwrap_err().to_string();
            assert!(err.contains(field), "{extra}: {err}");
        }
    }

    #[test]
    fn maps_checkpoint_names_onto_sublayers() {
        for (from, to) in [
            (
                "model.layers.1.self_attn.1.q_a_proj.weight",
                Some("model.layers.3.self_attn.q_a_proj.weight"),
            ),
            (
                "model.layers.2.input_layernorm.0.weight",
                Some("model.layers.4.input_layernorm.weight"),
            ),
            (
                "model.layers.0.mlps.1.down_proj.weight",
                Some("model.layers.1.mlp.down_proj.weight"),
            ),
            (
                "model.layers.1.mlp.router.e_score_correction_bias",
                Some("model.layers.2.moe.router.e_score_correction_bias"),
            ),
            (
                "model.layers.1.mlp.router.classifier.weight",
                Some("model.layers.2.moe.router.weight"),
            ),
            (
                "model.layers.0.mlp.experts.3.gate_proj.weight",
                Some("model.layers.0.moe.experts.3.gate_proj.weight"),
            ),
            ("model.layers.0.mlp.router.classifier.bias", None),
            ("model.norm.weight", Some("model.norm.weight")),
            ("model.mtp.layers.0.eh_proj.weight", None),
        ] {
            assert_eq!(checkpoint_name(from).as_deref(), to, "{from}");
        }
    }
}
