//! DeepSeek-V2 and DeepSeek-V3: multi-head latent attention ([`Mla`], its KV cache per head)
//! and, from layer `first_k_dense_replace` on, a mixture of SwiGLU experts (router
//! `mlp.gate`, experts `mlp.experts.{e}.*_proj`) plus shared experts (`mlp.shared_experts`, a
//! SwiGLU MLP `n_shared_experts` experts wide) added to every token; the leading layers keep a
//! dense MLP of `intermediate_size`. Routing is [`GroupedRouter`]: DeepSeek-V3 picks by the
//! sigmoid scores plus `e_score_correction_bias` within the `topk_group` best of `n_group`
//! groups (a group's worth: its two best choice scores), weights by the sigmoid scores,
//! renormalised with `norm_topk_prob`; DeepSeek-V2 picks by the softmax (`topk_method`
//! `greedy`, or `group_limited_greedy`: within the groups of the best maxima), its weights not
//! renormalised; both scale them by `routed_scaling_factor`. RoPE rotates the
//! `qk_rope_head_dim` channels alone, their pairs interleaved (DeepSeek-V2 always, V3 with
//! `rope_interleave`, its default); with YaRN, `mscale_all_dim` scales the softmax as
//! transformers' `yarn_apply_mscale` does. Sarvam's `sarvam_mla` is DeepSeek-V3 with other
//! defaults.

use serde_json::Value;

use super::components::{
    gated_mlp, AttentionSpec, ExpertWeights, GateActivation, GroupScore, GroupedRouter, Mla,
    MoeSpec, RopeTables, Router,
};
use super::decoder::Family;
use super::family::FamilySpec;
use crate::config::{
    read_decoder, read_rope, ArchConfig, Biases, DecoderFields, Fields, HfConfig, ModelType, Rope,
    Sign,
};
use crate::ir::{DType, GraphBuilder};
use crate::limits::config::{MAX_EXPERTS, MAX_LAYERS, MAX_WIDTH};
use crate::Result;

/// The family's registry entry.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "deepseek",
    summary: "multi-head latent attention (low-rank q and compressed key/value latent, RoPE on \
              `qk_rope_head_dim` channels, cache per head, v widened to k's head size), \
              dense layers then SwiGLU experts with shared experts; deepseek_v3: sigmoid router \
              with `e_score_correction_bias`, group-limited top-k (`n_group`, `topk_group`), \
              `routed_scaling_factor`; deepseek_v2: softmax router, greedy or group-limited; \
              sarvam_mla: DeepSeek-V3's with other defaults",
    model_types: &[
        ModelType::generative("deepseek_v2", "decoder", read_v2),
        ModelType::generative("deepseek_v3", "decoder", read_v3),
        ModelType::generative("sarvam_mla", "decoder", read_sarvam),
    ],
};

/// transformers' DeepseekV2Config and DeepseekV3Config: `attention_bias` on the attention's
/// projections, no MLP bias, RoPE theta 1e4, untied, no sliding window.
const FIELDS: DecoderFields = DecoderFields {
    biases: Biases::Configured { mlp_bias: false },
    ..DecoderFields::LLAMA
};

/// The MLA shape's defaults of a config class: `(q_lora_rank, kv_lora_rank, qk_nope_head_dim,
/// qk_rope_head_dim, v_head_dim)`, `None` for a v head size of `hidden_size /
/// num_attention_heads`.
pub type MlaDefaults = (Option<usize>, usize, usize, usize, Option<usize>);

/// DeepSeek's MLA defaults (V2 and V3 alike): q rank 1536, latent 512, 128 + 64 q/k channels,
/// 128 v channels.
const DEEPSEEK_MLA: MlaDefaults = (Some(1536), 512, 128, 64, Some(128));

fn read_v2(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    let fields = DecoderFields {
        rope: |raw, _, f| mla_rope(raw, 64, true, f),
        ..FIELDS
    };
    read_mla_decoder(raw, t, f, &fields, DEEPSEEK_MLA, |mla| {
        let experts = DeepseekExperts::read(raw, f, (64, None), 1407, 2, 0)?;
        let grouped = match raw.topk_method.as_deref().unwrap_or("greedy") {
            "greedy" => false,
            "group_limited_greedy" => true,
            other => {
                return Err(f.err(
                    "topk_method",
                    &format!("`{other}` (expected greedy or group_limited_greedy)"),
                ))
            }
        };
        let (groups, top_groups) = match grouped {
            true => read_groups(raw, f, experts.experts, None)?,
            false => (1, 1),
        };
        let router = GroupedRouter {
            sigmoid: false,
            correction_bias: false,
            groups,
            top_groups,
            group_score: GroupScore::Max,
            normalize: false,
            scale: routed_scaling(raw, f, 1.0)?,
        };
        Ok(Deepseek {
            mla,
            moe: DeepseekMoe { experts, router },
        })
    })
}

fn read_v3(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    let fields = DecoderFields {
        rope: |raw, _, f| mla_rope(raw, 64, raw.rope_interleave.unwrap_or(true), f),
        ..FIELDS
    };
    read_mla_decoder(raw, t, f, &fields, DEEPSEEK_MLA, |mla| {
        let experts = DeepseekExperts::read(raw, f, (256, Some(8)), 2048, 1, 3)?;
        let router = sigmoid_router(raw, f, experts.experts, (8, 4), (true, 2.5))?;
        Ok(Deepseek {
            mla,
            moe: DeepseekMoe { experts, router },
        })
    })
}

/// transformers' SarvamMLAConfig: DeepSeek-V3's with a plain `q_proj`, 128 experts, no group
/// limit, one leading dense layer, and the original config's spellings (`num_experts`,
/// `num_shared_experts`, RoPE type `deepseek_yarn` for `yarn`) read as transformers converts
/// them.
fn read_sarvam(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    let rope_scaling = match &raw.rope_scaling {
        Some(Value::Object(p))
            if [p.get("type"), p.get("rope_type")]
                .iter()
                .any(|v| v.and_then(Value::as_str) == Some("deepseek_yarn")) =>
        {
            let mut p = p.clone();
            p.remove("type");
            p.insert("rope_type".into(), Value::from("yarn"));
            Some(Value::Object(p))
        }
        other => other.clone(),
    };
    let raw = &HfConfig {
        n_routed_experts: raw.n_routed_experts.or(raw.num_experts),
        n_shared_experts: raw.n_shared_experts.or(raw.num_shared_experts),
        rope_scaling,
        ..raw.clone()
    };
    let fields = DecoderFields {
        rope: |raw, _, f| mla_rope(raw, 64, raw.rope_interleave.unwrap_or(true), f),
        ..FIELDS
    };
    read_mla_decoder(raw, t, f, &fields, (None, 512, 128, 64, Some(128)), |mla| {
        let experts = DeepseekExperts::read(raw, f, (128, Some(8)), 2048, 1, 1)?;
        let router = sigmoid_router(raw, f, experts.experts, (1, 1), (true, 2.5))?;
        Ok(Deepseek {
            mla,
            moe: DeepseekMoe { experts, router },
        })
    })
}

/// DeepSeek-V3's router as its config reads (also GLM-4.5's and dots.llm1's): sigmoid scores
/// with `e_score_correction_bias`, `(n_group, topk_group)` groups (`groups` by default) ranked
/// by their two best choice scores, `norm_topk_prob` (`normalize` by default),
/// `routed_scaling_factor` (`scale` by default).
pub fn sigmoid_router(
    raw: &HfConfig,
    f: &Fields<'_>,
    experts: usize,
    groups: (usize, usize),
    (normalize, scale): (bool, f64),
) -> Result<GroupedRouter> {
    let (groups, top_groups) = read_groups(raw, f, experts, Some(groups))?;
    Ok(GroupedRouter {
        sigmoid: true,
        correction_bias: true,
        groups,
        top_groups,
        group_score: GroupScore::TopTwoSum,
        normalize: raw.norm_topk_prob.unwrap_or(normalize),
        scale: routed_scaling(raw, f, scale)?,
    })
}

/// Reads an MLA decoder's config.json: the Llama-like fields as `fields` says, the cache's
/// head size being the q/k head size (transformers writes `head_dim` as the RoPE width), every
/// head a key/value head, and the [`Mla`] shape (`defaults` where absent) handed to `knobs`.
pub fn read_mla_decoder<K: crate::config::FamilyKnobs>(
    raw: &HfConfig,
    t: &'static ModelType,
    f: &Fields<'_>,
    fields: &DecoderFields,
    defaults: MlaDefaults,
    knobs: impl FnOnce(Mla) -> Result<K>,
) -> Result<ArchConfig> {
    let (q_rank, kv_rank, nope, rope, v) = defaults;
    let width = |field: &str, value: Option<i64>, default: usize| {
        f.optional_count(field, value, default, MAX_WIDTH)
    };
    let q_lora_rank = match raw.q_lora_rank {
        Some(None) => None,
        Some(Some(r)) => Some(f.count("q_lora_rank", r, MAX_WIDTH)?),
        None => q_rank,
    };
    let kv_lora_rank = width("kv_lora_rank", raw.kv_lora_rank, kv_rank)?;
    let qk_nope = width("qk_nope_head_dim", raw.qk_nope_head_dim, nope)?;
    let qk_rope = width("qk_rope_head_dim", raw.qk_rope_head_dim, rope)?;
    let heads = f.positive("num_attention_heads", raw.num_attention_heads, MAX_WIDTH)?;
    if let Some(kv) = raw.num_key_value_heads {
        if kv != heads as i64 {
            return Err(f.err(
                "num_key_value_heads",
                &format!(
                    "{kv} (multi-head latent attention expands its latent into every head: \
                     expected num_attention_heads = {heads})"
                ),
            ));
        }
    }
    let hidden = f.positive("hidden_size", raw.hidden_size, MAX_WIDTH)?;
    let v_head = match (raw.v_head_dim, v) {
        (Some(Some(d)), _) => f.count("v_head_dim", d, MAX_WIDTH)?,
        (None, Some(d)) => d,
        (Some(None), _) | (None, None) => hidden / heads,
    };
    let head_dim = qk_nope + qk_rope;
    if v_head == 0 || v_head > head_dim {
        return Err(f.err(
            "v_head_dim",
            &format!(
                "{v_head} (mobius stores v in the q/k head size: expected 1..={head_dim}, \
                 qk_nope_head_dim + qk_rope_head_dim)"
            ),
        ));
    }
    let raw_mla = HfConfig {
        head_dim: Some(head_dim as i64),
        num_key_value_heads: None,
        ..raw.clone()
    };
    let mut cfg = read_decoder(&raw_mla, t, f, fields, |_| {
        knobs(Mla {
            hidden,
            heads,
            q_lora_rank,
            kv_lora_rank,
            qk_nope,
            qk_rope,
            v_head,
            bias: raw.attention_bias.unwrap_or(false),
            latent_eps: 1e-6,
            scale: softmax_scale(raw, head_dim, f)?,
            latent_scale: 1.0,
        })
    })?;
    if cfg.rope.rotary_dim != qk_rope {
        return Err(f.err(
            "partial_rotary_factor",
            "is not read by multi-head latent attention (it rotates qk_rope_head_dim channels)",
        ));
    }
    cfg.qkv_bias = false;
    Ok(cfg)
}

/// The RoPE of an MLA config: `qk_rope_head_dim` channels (`default` when absent), theta 1e4
/// by default, pairs interleaved when `interleaved`.
pub fn mla_rope(raw: &HfConfig, default: usize, interleaved: bool, f: &Fields<'_>) -> Result<Rope> {
    let width = match raw.qk_rope_head_dim {
        Some(w) => f.count("qk_rope_head_dim", w, MAX_WIDTH)?,
        None => default,
    };
    let rope = read_rope(raw, width, 10_000.0, f)?;
    Ok(Rope {
        interleaved,
        ..rope
    })
}

/// transformers' MLA softmax scale: `head_dim^-0.5`, times `mscale²` where the RoPE has a
/// type other than `default` and a non-zero `mscale_all_dim` (`mscale = 0.1 · mscale_all_dim ·
/// ln(factor) + 1` for a factor above 1, else 1), computed in f64 as Python does.
pub fn softmax_scale(raw: &HfConfig, head_dim: usize, f: &Fields<'_>) -> Result<f32> {
    let base = (head_dim as f64).powf(-0.5);
    let (field, params) = match (&raw.rope_parameters, &raw.rope_scaling) {
        (Some(p @ Value::Object(_)), _) => ("rope_parameters", p),
        (_, Some(p @ Value::Object(_))) => ("rope_scaling", p),
        _ => return Ok(base as f32),
    };
    let kind = params.get("rope_type").or_else(|| params.get("type"));
    if matches!(kind.and_then(Value::as_str), None | Some("default")) {
        return Ok(base as f32);
    }
    let all_dim = format!("{field}.mscale_all_dim");
    let Some(m) = f.json_number(&all_dim, params.get("mscale_all_dim"))? else {
        return Ok(base as f32);
    };
    if m == 0.0 {
        return Ok(base as f32);
    }
    f.number(&all_dim, Some(m), m, Sign::NonNegative)?;
    let factor_field = format!("{field}.factor");
    let Some(factor) = f.json_number(&factor_field, params.get("factor"))? else {
        return Err(f.err(&factor_field, "missing (expected a finite number > 0)"));
    };
    f.number(&factor_field, Some(factor), factor, Sign::Positive)?;
    let mscale = if factor <= 1.0 {
        1.0
    } else {
        0.1 * m * factor.ln() + 1.0
    };
    Ok((base * mscale * mscale) as f32)
}

/// `routed_scaling_factor`, `default` when absent.
fn routed_scaling(raw: &HfConfig, f: &Fields<'_>, default: f64) -> Result<f32> {
    let field = "routed_scaling_factor";
    f.number(field, raw.routed_scaling_factor, default, Sign::Positive)
}

/// `(n_group, topk_group)` (`defaults` when absent; required without defaults): groups that
/// split the experts evenly, at least two experts each, and at most `n_group` kept.
pub(crate) fn read_groups(
    raw: &HfConfig,
    f: &Fields<'_>,
    experts: usize,
    defaults: Option<(usize, usize)>,
) -> Result<(usize, usize)> {
    let read = |field: &str, v: Option<Option<i64>>, default: Option<usize>| match (v, default) {
        (Some(Some(n)), _) => f.count(field, n, MAX_EXPERTS),
        (None, Some(d)) => Ok(d),
        _ => Err(f.err(field, "missing (expected a positive integer)")),
    };
    let groups = read("n_group", raw.n_group, defaults.map(|d| d.0))?;
    let kept = read("topk_group", raw.topk_group, defaults.map(|d| d.1))?;
    if experts % groups != 0 || experts / groups < 2 {
        return Err(f.err(
            "n_group",
            &format!(
                "{groups} (expected a divisor of the {experts} experts leaving ≥ 2 per group)"
            ),
        ));
    }
    if kept > groups {
        return Err(f.err(
            "topk_group",
            &format!("{kept} is more than the {groups} groups (n_group)"),
        ));
    }
    Ok((groups, kept))
}

/// The experts of a DeepSeek MoE layer and which layers have them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeepseekExperts {
    /// `n_routed_experts`.
    pub experts: usize,
    /// `num_experts_per_tok`.
    pub top_k: usize,
    /// `moe_intermediate_size`: each routed expert's width.
    pub width: usize,
    /// `n_shared_experts`: the shared experts' MLP is this many expert widths wide (0: none).
    pub shared: usize,
    /// Per layer, whether its MLP is a MoE block (the others are dense).
    pub moe_layers: Vec<bool>,
}

impl DeepseekExperts {
    /// Reads the expert fields with the defaults `(n_routed_experts, num_experts_per_tok)`
    /// (`None`: required), `moe_intermediate_size`, `n_shared_experts` and
    /// `first_k_dense_replace` (the leading dense layers).
    pub fn read(
        raw: &HfConfig,
        f: &Fields<'_>,
        (experts, top_k): (usize, Option<usize>),
        width: usize,
        shared: usize,
        first_dense: usize,
    ) -> Result<DeepseekExperts> {
        let experts = f.optional_count(
            "n_routed_experts",
            raw.n_routed_experts,
            experts,
            MAX_EXPERTS,
        )?;
        let k_field = "num_experts_per_tok";
        let top_k = match (raw.num_experts_per_tok, top_k) {
            (Some(k), _) => f.count(k_field, k, MAX_EXPERTS)?,
            (None, Some(k)) => k,
            (None, None) => return Err(f.err(k_field, "missing (expected a positive integer)")),
        };
        if top_k > experts {
            return Err(f.err(
                k_field,
                &format!("{top_k} is more than the {experts} experts of a layer"),
            ));
        }
        let width = f.optional_count(
            "moe_intermediate_size",
            raw.moe_intermediate_size,
            width,
            MAX_WIDTH,
        )?;
        let shared = match raw.n_shared_experts {
            Some(n) => f.index("n_shared_experts", n, MAX_EXPERTS)?,
            None => shared,
        };
        let first_dense = match raw.first_k_dense_replace {
            Some(n) => f.index("first_k_dense_replace", n, MAX_LAYERS)?,
            None => first_dense,
        };
        let layers = raw.num_hidden_layers.unwrap_or(0).max(0) as usize;
        Ok(DeepseekExperts {
            experts,
            top_k,
            width,
            shared,
            moe_layers: (0..layers).map(|i| i >= first_dense).collect(),
        })
    }
}

/// A DeepSeek mixture of experts: its experts, which layers have them, and its router.
#[derive(Debug, Clone, PartialEq)]
pub struct DeepseekMoe {
    /// The experts and the layers that have them.
    pub experts: DeepseekExperts,
    /// The router.
    pub router: GroupedRouter,
}

impl DeepseekMoe {
    /// The feed-forward block of layer `i` (module `layer`) on `x`: the family's dense MLP
    /// `dense` of `{layer}.mlp` where the layer has no experts, else the routed experts plus
    /// the shared experts (`{layer}.mlp.shared_experts`).
    #[allow(clippy::too_many_arguments)]
    pub fn layer(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        layer: &str,
        i: usize,
        dtype: DType,
        dense: impl FnOnce(&mut GraphBuilder, &str) -> String,
    ) -> String {
        let mlp = format!("{layer}.mlp");
        let e = &self.experts;
        if !e.moe_layers.get(i).copied().unwrap_or(false) {
            return dense(b, &mlp);
        }
        let router = Router::Grouped(self.router);
        let routing = (e.experts, e.top_k);
        let spec = MoeSpec::new(cfg, e.width, routing, router, ExpertWeights::PROJ);
        let routed = spec.build(b, x, &mlp, dtype);
        if e.shared == 0 {
            return routed;
        }
        let sizes = (cfg.hidden_size, e.width * e.shared);
        let shared = format!("{mlp}.shared_experts");
        let shared = gated_mlp(b, x, &shared, sizes, false, GateActivation::Silu, dtype);
        b.op("Add", &[&routed, &shared], vec![])
    }
}

/// DeepSeek's knobs and hooks.
#[derive(Debug, Clone, PartialEq)]
pub struct Deepseek {
    /// The attention's shape.
    pub mla: Mla,
    /// The mixture of experts.
    pub moe: DeepseekMoe,
}

impl Family for Deepseek {
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
        self.mla.scale
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
        let dense = |b: &mut GraphBuilder, mlp: &str| self.mlp(b, cfg, x, mlp, dtype);
        self.moe.layer(b, cfg, x, layer, i, dtype, dense)
    }
}

#[cfg(test)]
mod tests {
    use super::Deepseek;
    use crate::config::ArchConfig;
    use crate::models::components::GroupScore;

    fn parse(model_type: &str, extra: &str) -> crate::Result<ArchConfig> {
        let fields = format!(
            r#""model_type": "{model_type}", "hidden_size": 64, "intermediate_size": 128,
            "num_attention_heads": 4, "num_hidden_layers": 4, "vocab_size": 300,
            "max_position_embeddings": 128, "head_dim": 8"#
        );
        crate::models::parse_fields(&fields, extra)
    }

    #[test]
    fn v3_defaults_follow_transformers() {
        let c = parse(
            "deepseek_v3",
            r#", "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16,
            "n_routed_experts": 16, "kv_lora_rank": 32, "q_lora_rank": 48"#,
        )
        .unwrap();
        let k = c.knobs::<Deepseek>().unwrap();
        assert_eq!((c.head_dim, c.num_key_value_heads), (24, 4));
        assert_eq!((c.rope.rotary_dim, c.rope.interleaved), (8, true));
        assert_eq!((k.moe.experts.top_k, k.moe.experts.shared), (8, 1));
        assert_eq!(k.moe.experts.moe_layers, [false, false, false, true]);
        assert_eq!((k.moe.router.groups, k.moe.router.top_groups), (8, 4));
        assert!(k.moe.router.sigmoid && k.moe.router.correction_bias && k.moe.router.normalize);
        assert_eq!(
            (k.moe.router.scale, k.moe.router.group_score),
            (2.5, GroupScore::TopTwoSum)
        );
        assert_eq!(k.mla.scale, (24f64.powf(-0.5)) as f32);
    }

    #[test]
    fn sarvam_reads_its_original_spellings() {
        let c = parse(
            "sarvam_mla",
            r#", "num_experts": 16, "num_shared_experts": 2, "rope_scaling": {"type":
            "deepseek_yarn", "factor": 4, "mscale_all_dim": 1.0, "original_max_position_embeddings": 32}"#,
        )
        .unwrap();
        let k = c.knobs::<Deepseek>().unwrap();
        assert_eq!((k.moe.experts.experts, k.moe.experts.shared), (16, 2));
        assert_eq!((k.mla.q_lora_rank, k.moe.router.groups), (None, 1));
        assert!(matches!(
            c.rope.scaling,
            crate::config::RopeScaling::Yarn(_)
        ));
        let m = 0.1 * 4f64.ln() + 1.0;
        assert_eq!(k.mla.scale, (192f64.powf(-0.5) * m * m) as f32);
    }

    #[test]
    fn yarn_mscale_all_dim_scales_the_softmax() {
        let c = parse(
            "deepseek_v3",
            r#", "n_routed_experts": 16, "rope_scaling": {"type": "yarn", "factor": 40,
            "mscale": 1.0, "mscale_all_dim": 1.0, "original_max_position_embeddings": 4}"#,
        )
        .unwrap();
        let m = 0.1 * 40f64.ln() + 1.0;
        let k = c.knobs::<Deepseek>().unwrap();
        assert_eq!(k.mla.scale, (192f64.powf(-0.5) * m * m) as f32);
    }

    #[test]
    fn v2_reads_its_router_and_refuses_bad_fields() {
        let c = parse(
            "deepseek_v2",
            r#", "num_experts_per_tok": 2, "n_routed_experts": 8, "topk_method":
            "group_limited_greedy", "n_group": 4, "topk_group": 2, "q_lora_rank": null"#,
        )
        .unwrap();
        let k = c.knobs::<Deepseek>().unwrap();
        assert_eq!(k.mla.q_lora_rank, None);
        assert!(!k.moe.router.sigmoid && !k.moe.router.normalize && c.rope.interleaved);
        assert_eq!((k.moe.router.groups, k.moe.router.top_groups), (4, 2));
        for (extra, field) in [
            (r#", "n_routed_experts": 8"#, "num_experts_per_tok"),
            (
                r#", "num_experts_per_tok": 2, "topk_method": "best""#,
                "topk_method",
            ),
            (
                r#", "num_experts_per_tok": 2, "num_key_value_heads": 2"#,
                "num_key_value_heads",
            ),
            (
                r#", "num_experts_per_tok": 2, "v_head_dim": 500"#,
                "v_head_dim",
            ),
            (
                r#", "num_experts_per_tok": 2, "n_routed_experts": 8,
                "topk_method": "group_limited_greedy", "n_group": 3, "topk_group": 1"#,
                "n_group",
            ),
        ] {
            let err = parse("deepseek_v2", extra).unwrap_err().to_string();
            assert!(err.contains(field), "{extra}: {err}");
        }
    }
}
