//! Qwen3-Next: a hybrid decoder whose layers are either Gated DeltaNet linear attention
//! ([`super::components::gated_delta`], module `layers.{i}.linear_attn`, carrying its conv and
//! recurrent states `past.{i}.conv` / `past.{i}.recurrent` instead of a KV cache) or gated
//! GQA attention (`q_proj` gives each head's query and an output gate, the attention result
//! times `sigmoid(gate)` before `o_proj`; per-head q/k RMSNorms; partial RoPE, a quarter of each
//! head by default), as `layer_types` says (else every `full_attention_interval`-th layer,
//! default 4, attends). Every norm scales by `1 + weight` (the linear attention's gated norm by
//! its plain weight). The MLP is Qwen2-MoE's sparse block (softmax top-k, renormalised by
//! default, plus the sigmoid-gated shared expert) in the layers `decoder_sparse_step` selects
//! and `mlp_only_layers` does not name, else a dense SwiGLU MLP. Qwen3.5's text decoders
//! (`qwen3_5_text`: a dense SwiGLU MLP in every layer; `qwen3_5_moe_text`: the sparse block in
//! every layer, always renormalised) are the same layers with the linear attention's
//! projections unfused (`in_proj_qkv`, `in_proj_z`, `in_proj_b`, `in_proj_a`) and Qwen3.5's
//! interleaved multimodal RoPE: `position_ids` `[3, batch, sequence]` (temporal, height and
//! width positions; `rope_parameters.mrope_section` frequency pairs each), as onnxruntime-genai
//! 0.18 feeds its `qwen3_5_text` / `qwen3_5_moe_text` packages. onnxruntime-genai 0.18 has no
//! `qwen3_next` model type: that package has no genai_config.json (docs/recurrent.md).

use super::components::{
    gated_shared_expert, interleaved_mrope_tables, linear, AttentionSpec, DecoderInputs,
    ExpertWeights, GatedDeltaMixer, MoeSpec, Norm, NormKind, RopeTables, Router, SsmMixer,
};
use super::decoder::{plain_rotary, Family, QkNorm};
use super::family::FamilySpec;
use super::multimodal::{read_text_part, TextPart, TextType};
use super::qwen_moe::{knobs, QwenMoe};
use crate::config::{
    read_decoder, read_rope, ArchConfig, DecoderFields, Fields, HfConfig, Knobs, ModelType,
    RopeScaling, Sign,
};
use crate::ir::{DType, GraphBuilder};
use crate::limits::config::{MAX_CONV_KERNEL, MAX_HEADS, MAX_LAYERS, MAX_WIDTH};
use crate::Result;
use serde_json::Value;

/// The family's registry entry.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "qwen3_next",
    summary: "hybrid: Gated DeltaNet linear-attention layers (conv and recurrent states \
              carried as `past.{i}.conv` / `past.{i}.recurrent`, the recurrence an ONNX Scan) \
              and output-gated GQA layers with partial RoPE; (1 + w) RMSNorms; Qwen2-MoE's \
              sparse experts with a gated shared expert (Qwen3.5: unfused projections, dense \
              or MoE in every layer, interleaved multimodal RoPE on `position_ids` `[3, batch, \
              sequence]`; `qwen3_5`, `qwen3_5_moe`: the text decoder of \
              Qwen3_5(Moe)ForConditionalGeneration, no vision part)",
    model_types: &[
        ModelType {
            name: "qwen3_next",
            genai_type: None,
            read,
            builds_longrope: false,
        },
        ModelType {
            name: "qwen3_5_text",
            genai_type: Some("qwen3_5_text"),
            read: read_qwen3_5,
            builds_longrope: false,
        },
        ModelType {
            name: "qwen3_5_moe_text",
            genai_type: Some("qwen3_5_moe_text"),
            read: read_qwen3_5_moe,
            builds_longrope: false,
        },
        ModelType::generative("qwen3_5", "qwen3_5_text", |raw, t, f| {
            read_text_part(raw, t, f, &QWEN3_5_IMAGE_TEXT)
        }),
        ModelType::generative("qwen3_5_moe", "qwen3_5_moe_text", |raw, t, f| {
            read_text_part(raw, t, f, &QWEN3_5_MOE_IMAGE_TEXT)
        }),
    ],
};

/// Qwen3_5ForConditionalGeneration's text decoder: a `qwen3_5_text` config (the checkpoints
/// Qwen publishes), onnxruntime-genai's `qwen3_5_text` as its builder makes it from the same
/// checkpoint.
const QWEN3_5_IMAGE_TEXT: TextPart = TextPart {
    default_type: "qwen3_5_text",
    text_types: &[TextType {
        name: "qwen3_5_text",
        // transformers' Qwen3_5TextConfig defaults the reader does not hold itself.
        defaults: r#"{"vocab_size": 248320, "hidden_size": 4096, "intermediate_size": 12288,
            "num_hidden_layers": 32, "num_attention_heads": 16, "num_key_value_heads": 4,
            "max_position_embeddings": 32768, "head_dim": 256}"#,
        read: read_qwen3_5,
    }],
    decoder: Knobs::clone,
};

/// Qwen3_5MoeForConditionalGeneration's text decoder: a `qwen3_5_moe_text` config.
const QWEN3_5_MOE_IMAGE_TEXT: TextPart = TextPart {
    default_type: "qwen3_5_moe_text",
    text_types: &[TextType {
        name: "qwen3_5_moe_text",
        // transformers' Qwen3_5MoeTextConfig defaults the reader does not hold itself.
        defaults: r#"{"vocab_size": 248320, "hidden_size": 2048, "num_hidden_layers": 40,
            "num_attention_heads": 16, "num_key_value_heads": 2,
            "max_position_embeddings": 32768, "head_dim": 256}"#,
        read: read_qwen3_5_moe,
    }],
    decoder: Knobs::clone,
};

/// transformers' Qwen3NextConfig: RoPE theta 1e4 on a quarter of each head
/// (`partial_rotary_factor` 0.25 unless `rope_parameters` says otherwise), head_dim 256,
/// `rms_norm_eps` 1e-6, untied, `attention_bias` on q, k, v and o.
const FIELDS: DecoderFields = DecoderFields {
    head_dim: Some(256),
    rope: |raw, head_dim, f| {
        let raw = HfConfig {
            partial_rotary_factor: Some(raw.partial_rotary_factor.unwrap_or(0.25)),
            ..raw.clone()
        };
        read_rope(&raw, head_dim, 10_000.0, f)
    },
    use_sliding_window: false,
    ..DecoderFields::LLAMA
};

/// Qwen3-Next's knobs.
#[derive(Debug, Clone, PartialEq)]
pub struct Qwen3Next {
    /// Per layer, whether it is a linear-attention layer (else full attention).
    pub linear_layers: Vec<bool>,
    /// The mixer of every linear-attention layer.
    pub mixer: GatedDeltaMixer,
    /// The sparse MLP blocks (`None`: `num_experts` 0, every MLP dense).
    pub moe: Option<QwenMoe>,
    /// Qwen3.5's multimodal RoPE sections (frequency pairs turned by the temporal, height and
    /// width positions, interleaved), with `position_ids` `[3, batch, sequence]`; `None`
    /// (Qwen3-Next): plain RoPE on `[batch, sequence]`.
    pub mrope: Option<[usize; 3]>,
}

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    let linear_layers = read_layer_kinds(raw, f)?;
    let mixer = read_mixer(raw, f, true)?;
    read_decoder(&plain(raw), t, f, &FIELDS, |dims| {
        let moe = match raw.num_experts {
            Some(0) => None,
            _ => {
                let shared = f.optional_count(
                    "shared_expert_intermediate_size",
                    raw.shared_expert_intermediate_size,
                    512,
                    MAX_WIDTH,
                )?;
                let mut moe = knobs(raw, f, dims, (512, 10), Some(shared), true)?;
                if raw.moe_intermediate_size.is_none() {
                    moe.expert_width = 512;
                }
                moe.normalize = raw.norm_topk_prob.unwrap_or(true);
                Some(moe)
            }
        };
        Ok(Qwen3Next {
            linear_layers,
            mixer,
            moe,
            mrope: None,
        })
    })
}

/// Qwen3_5TextConfig: Qwen3-Next's fields and defaults without experts; the linear attention's
/// projections unfused.
fn read_qwen3_5(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    let linear_layers = read_layer_kinds(raw, f)?;
    let mixer = read_mixer(raw, f, false)?;
    let mrope = Some(read_mrope_section(raw, f)?);
    let cfg = read_decoder(&plain(raw), t, f, &FIELDS, |_| {
        Ok(Qwen3Next {
            linear_layers,
            mixer,
            moe: None,
            mrope,
        })
    })?;
    static_rope(cfg, f)
}

/// Qwen3_5MoeTextConfig: 256 experts of width 512, top 8, always renormalised, a shared
/// expert of width 512, in every layer.
fn read_qwen3_5_moe(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    let linear_layers = read_layer_kinds(raw, f)?;
    let mixer = read_mixer(raw, f, false)?;
    let mrope = Some(read_mrope_section(raw, f)?);
    let every_layer = HfConfig {
        decoder_sparse_step: None,
        mlp_only_layers: None,
        ..raw.clone()
    };
    // No dense MLP: `intermediate_size` (absent from the config class) sizes nothing.
    let dims_of = HfConfig {
        intermediate_size: raw.intermediate_size.or(Some(1)),
        ..plain(raw)
    };
    let cfg = read_decoder(&dims_of, t, f, &FIELDS, |dims| {
        let shared = f.optional_count(
            "shared_expert_intermediate_size",
            raw.shared_expert_intermediate_size,
            512,
            MAX_WIDTH,
        )?;
        let mut moe = knobs(&every_layer, f, dims, (256, 8), Some(shared), true)?;
        if raw.moe_intermediate_size.is_none() {
            moe.expert_width = 512;
        }
        moe.normalize = true;
        Ok(Qwen3Next {
            linear_layers,
            mixer,
            moe: Some(moe),
            mrope,
        })
    })?;
    static_rope(cfg, f)
}

/// Qwen3.5's `mrope_section` (`rope_parameters`, or v4's `rope_scaling`; transformers'
/// default `[11, 11, 10]`): three counts of frequency pairs.
fn read_mrope_section(raw: &HfConfig, f: &Fields<'_>) -> Result<[usize; 3]> {
    let (field, params) = match (&raw.rope_parameters, &raw.rope_scaling) {
        (Some(p @ Value::Object(_)), _) => ("rope_parameters.mrope_section", p),
        (_, Some(p @ Value::Object(_))) => ("rope_scaling.mrope_section", p),
        _ => return Ok([11, 11, 10]),
    };
    let expected = "expected three integers ≥ 0 (the temporal, height and width sections)";
    match params.get("mrope_section") {
        None | Some(Value::Null) => Ok([11, 11, 10]),
        Some(Value::Array(v)) if v.len() == 3 => {
            let mut sections = [0; 3];
            for (slot, x) in sections.iter_mut().zip(v) {
                let n = x
                    .as_i64()
                    .ok_or_else(|| f.err(field, &format!("{x}: {expected}")))?;
                *slot = f.index(field, n, MAX_WIDTH)?;
            }
            Ok(sections)
        }
        Some(other) => Err(f.err(field, &format!("{other}: {expected}"))),
    }
}

/// `cfg` unless its RoPE is dynamic NTK, whose per-pass tables the multimodal positions do not
/// take (transformers' Qwen3.5 configs use the default RoPE).
fn static_rope(cfg: ArchConfig, f: &Fields<'_>) -> Result<ArchConfig> {
    match cfg.rope.scaling {
        RopeScaling::Dynamic { .. } => Err(f.err(
            "rope_parameters.rope_type",
            "`dynamic` is not supported with Qwen3.5's multimodal RoPE (mrope_section)",
        )),
        _ => Ok(cfg),
    }
}

/// The config without the fields the layer kinds came from (no sliding windows).
fn plain(raw: &HfConfig) -> HfConfig {
    HfConfig {
        layer_types: None,
        sliding_window: None,
        ..raw.clone()
    }
}

/// Per layer, whether `layer_types` names it `linear_attention` (else `full_attention`);
/// without `layer_types`, every `full_attention_interval`-th layer (default 4) attends.
pub(super) fn read_layer_kinds(raw: &HfConfig, f: &Fields<'_>) -> Result<Vec<bool>> {
    let layers = f.positive("num_hidden_layers", raw.num_hidden_layers, MAX_LAYERS)?;
    match &raw.layer_types {
        None => {
            let field = "full_attention_interval";
            let every = f.optional_count(field, raw.full_attention_interval, 4, MAX_LAYERS)?;
            Ok((0..layers).map(|i| (i + 1) % every != 0).collect())
        }
        Some(types) if types.len() != layers => Err(f.err(
            "layer_types",
            &format!(
                "{} entries for {layers} layers (num_hidden_layers)",
                types.len()
            ),
        )),
        Some(types) => types
            .iter()
            .map(|t| match t.as_str() {
                "linear_attention" => Ok(true),
                "full_attention" => Ok(false),
                other => Err(f.err(
                    "layer_types",
                    &format!(
                        "`{other}` is not a layer type of this model (linear_attention, \
                         full_attention)"
                    ),
                )),
            })
            .collect(),
    }
}

/// The Gated DeltaNet mixer of the config (`linear_*` fields, transformers' defaults: 16 key
/// heads and 32 value heads of 128 channels, kernel 4), its gated norm's epsilon
/// `rms_norm_eps`; `fused`: Qwen3-Next's interleaved `in_proj_qkvz` / `in_proj_ba`.
pub(super) fn read_mixer(raw: &HfConfig, f: &Fields<'_>, fused: bool) -> Result<GatedDeltaMixer> {
    let hidden = f.positive("hidden_size", raw.hidden_size, MAX_WIDTH)?;
    let key_heads = f.optional_count(
        "linear_num_key_heads",
        raw.linear_num_key_heads,
        16,
        MAX_HEADS,
    )?;
    let value_heads = f.optional_count(
        "linear_num_value_heads",
        raw.linear_num_value_heads,
        32,
        MAX_HEADS,
    )?;
    let key_dim = f.optional_count(
        "linear_key_head_dim",
        raw.linear_key_head_dim,
        128,
        MAX_WIDTH,
    )?;
    let value_dim = f.optional_count(
        "linear_value_head_dim",
        raw.linear_value_head_dim,
        128,
        MAX_WIDTH,
    )?;
    let kernel = f.optional_count(
        "linear_conv_kernel_dim",
        raw.linear_conv_kernel_dim,
        4,
        MAX_CONV_KERNEL,
    )?;
    if kernel < 2 {
        return Err(f.err(
            "linear_conv_kernel_dim",
            "must be at least 2 (the conv state holds linear_conv_kernel_dim − 1 steps)",
        ));
    }
    if value_heads % key_heads != 0 {
        return Err(f.err(
            "linear_num_value_heads",
            &format!("{value_heads} must be a multiple of linear_num_key_heads ({key_heads})"),
        ));
    }
    // The widest projection: q, k, v and z side by side.
    let width = 2 * key_heads as u64 * key_dim as u64 + 2 * value_heads as u64 * value_dim as u64;
    if width > MAX_WIDTH as u64 {
        return Err(f.err(
            "linear_value_head_dim",
            &format!(
                "gives a projection of {width} outputs (2·linear_num_key_heads·\
                 linear_key_head_dim + 2·linear_num_value_heads·linear_value_head_dim; at most \
                 {MAX_WIDTH})"
            ),
        ));
    }
    let eps = f.number("rms_norm_eps", raw.rms_norm_eps, 1e-6, Sign::NonNegative)?;
    Ok(GatedDeltaMixer {
        hidden,
        key_heads,
        value_heads,
        key_dim,
        value_dim,
        kernel,
        eps,
        fused,
    })
}

/// The name of the attention output gate `q_proj`'s second half gives, of attention module
/// `attn`.
fn output_gate(attn: &str) -> String {
    format!("{attn}.output_gate")
}

/// The gated attention both Qwen3-Next and Qwen3.5 share: `q_proj` (`2 · heads · head_dim`
/// outputs, each head's query then its gate), `k_proj`, `v_proj`, per-head `(1 + w)` q/k norms,
/// partial RoPE; the gate `sigmoid` times the attention result before `o_proj`.
pub(super) trait GatedAttention {
    /// The q, k and v of `x`; the gate is left under [`output_gate`]`(attn)`.
    #[allow(clippy::too_many_arguments)]
    fn gated_qkv(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        attn: &str,
        i: usize,
        rotary: &[RopeTables],
        spec: &AttentionSpec<'_>,
        dtype: DType,
    ) -> [String; 3]
    where
        Self: Family,
    {
        let (h, d, bias) = (cfg.hidden_size, cfg.head_dim, cfg.qkv_bias);
        let heads = spec.q_heads;
        let both = linear(
            b,
            x,
            &format!("{attn}.q_proj"),
            h,
            2 * heads * d,
            bias,
            dtype,
        );
        let shape = b.const_i64(&[0, 0, heads as i64, 2 * d as i64]);
        let both = b.op("Reshape", &[&both, &shape], vec![]);
        let sizes = b.const_i64(&[d as i64, d as i64]);
        let (q, gate) = (b.fresh_name("Split"), b.fresh_name("Split"));
        b.node(
            "",
            "Split",
            &[&both, &sizes],
            vec![("axis", crate::ir::Attr::Int(-1))],
            vec![q.clone(), gate.clone()],
        );
        let flat = b.const_i64(&[0, 0, (heads * d) as i64]);
        let q = b.op("Reshape", &[&q, &flat], vec![]);
        let gate = b.op("Reshape", &[&gate, &flat], vec![]);
        b.op_into("Sigmoid", &[&gate], vec![], &output_gate(attn));
        let kv = cfg.kv_size();
        let k = linear(b, x, &format!("{attn}.k_proj"), h, kv, bias, dtype);
        let v = linear(b, x, &format!("{attn}.v_proj"), h, kv, bias, dtype);
        let (q, k) = self.qk_norm(b, cfg, q, k, attn, dtype);
        let (q, k) = self.rotate_qk(b, cfg, i, rotary, (q, k), spec);
        [q, k, v]
    }

    /// The attention result `y` times its gate, then `o_proj`.
    fn gated_output(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        y: &str,
        attn: &str,
        dtype: DType,
    ) -> String
    where
        Self: Family,
    {
        let gated = b.op("Mul", &[y, &output_gate(attn)], vec![]);
        self.o_proj(b, cfg, &gated, attn, dtype)
    }
}

impl GatedAttention for Qwen3Next {}

impl Family for Qwen3Next {
    fn norm(&self, cfg: &ArchConfig) -> Norm {
        Norm {
            kind: NormKind::OffsetRms,
            eps: cfg.rms_norm_eps,
        }
    }

    fn qk_norm_kind(&self, _cfg: &ArchConfig) -> QkNorm {
        QkNorm::PerHead
    }

    fn rotary_positions(&self, _cfg: &ArchConfig) -> bool {
        self.linear_layers.contains(&false)
    }

    fn position_rows(&self, _cfg: &ArchConfig) -> Option<usize> {
        self.mrope.map(|_| 3)
    }

    fn rotary(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        io: &DecoderInputs,
        dtype: DType,
    ) -> Vec<RopeTables> {
        let (positions, ids) = (cfg.max_position_embeddings, &io.position_ids);
        vec![match self.mrope {
            Some(sections) => {
                interleaved_mrope_tables(b, &cfg.rope, positions, ids, sections, dtype)
            }
            None => plain_rotary(b, cfg, io, dtype),
        }]
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
        self.gated_qkv(b, cfg, x, attn, i, rotary, spec, dtype)
    }

    fn attention_output(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        _x: &str,
        y: &str,
        attn: &str,
        _spec: &AttentionSpec<'_>,
        dtype: DType,
    ) -> String {
        self.gated_output(b, cfg, y, attn, dtype)
    }

    fn ssm_mixer(&self, _cfg: &ArchConfig, i: usize) -> Option<SsmMixer> {
        self.linear_layers[i].then_some(SsmMixer::GatedDelta(self.mixer))
    }

    fn ssm_module(&self) -> &'static str {
        "linear_attn"
    }

    fn ssm_with_mlp(&self) -> bool {
        true
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
        let moe = match &self.moe {
            Some(moe) if moe.moe_layers.get(i).copied().unwrap_or(false) => moe,
            _ => return self.mlp(b, cfg, x, &mlp, dtype),
        };
        let routing = (moe.experts, moe.top_k);
        let router = Router::Softmax {
            normalize: moe.normalize,
        };
        let spec = MoeSpec::new(cfg, moe.expert_width, routing, router, ExpertWeights::PROJ);
        let routed = spec.build(b, x, &mlp, dtype);
        let width = moe.shared_expert.expect("Qwen3-Next has a shared expert");
        let shared = gated_shared_expert(b, x, &mlp, (cfg.hidden_size, width), dtype);
        b.op("Add", &[&routed, &shared], vec![])
    }
}

#[cfg(test)]
mod tests {
    use super::Qwen3Next;
    use crate::config::ArchConfig;

    fn parse(extra: &str) -> crate::Result<ArchConfig> {
        parse_as("qwen3_next", extra)
    }

    fn parse_as(model_type: &str, extra: &str) -> crate::Result<ArchConfig> {
        crate::models::parse_fields(
            &format!(r#""model_type": "{model_type}", "#),
            &format!(
                r#""hidden_size": 64, "intermediate_size": 128,
            "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 4,
            "head_dim": 16, "vocab_size": 300, "max_position_embeddings": 128,
            "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 16,
            "linear_value_head_dim": 8, "num_experts_per_tok": 2,
            "moe_intermediate_size": 32{extra}"#
            ),
        )
    }

    #[test]
    fn reads_the_layer_kinds_the_mixer_and_quarter_rotary() {
        let c = parse(r#", "num_experts": 4"#).unwrap();
        let k = c.knobs::<Qwen3Next>().unwrap();
        assert_eq!(k.linear_layers, [true, true, true, false]);
        let m = k.mixer;
        assert_eq!(
            (m.key_heads, m.value_heads, m.key_dim, m.value_dim),
            (2, 4, 16, 8)
        );
        assert_eq!((m.kernel, m.fused, m.conv().channels), (4, true, 96));
        assert_eq!(c.rope.rotary_dim, 4);
        let moe = k.moe.clone().unwrap();
        assert!(moe.normalize);
        assert_eq!(moe.shared_expert, Some(512));
        let c = parse(
            r#", "layer_types": ["full_attention", "linear_attention", "full_attention",
            "linear_attention"], "num_experts": 0, "full_attention_interval": 2"#,
        )
        .unwrap();
        let k = c.knobs::<Qwen3Next>().unwrap();
        assert_eq!(k.linear_layers, [false, true, false, true]);
        assert!(k.moe.is_none());
        let c = parse(r#", "full_attention_interval": 2"#).unwrap();
        let k = c.knobs::<Qwen3Next>().unwrap();
        assert_eq!(k.linear_layers, [true, false, true, false]);
    }

    #[test]
    fn qwen3_5_reads_unfused_projections_and_its_mlps() {
        let dense = parse_as(
            "qwen3_5_text",
            r#", "rope_parameters": {"rope_type": "default",
            "rope_theta": 1e7, "partial_rotary_factor": 0.25, "mrope_section": [11, 11, 10],
            "mrope_interleaved": true}"#,
        );
        let c = dense.unwrap();
        let k = c.knobs::<Qwen3Next>().unwrap();
        assert!(!k.mixer.fused && k.moe.is_none());
        assert_eq!((c.rope.rotary_dim, k.mrope), (4, Some([11, 11, 10])));
        let plain = parse(r#", "num_experts": 0"#).unwrap();
        assert_eq!(plain.knobs::<Qwen3Next>().unwrap().mrope, None);
        let c = parse_as(
            "qwen3_5_moe_text",
            r#", "num_experts": 4, "norm_topk_prob": false"#,
        )
        .unwrap();
        let moe = c.knobs::<Qwen3Next>().unwrap().moe.clone().unwrap();
        assert!(moe.normalize && moe.moe_layers.iter().all(|&m| m));
        assert_eq!((moe.experts, moe.top_k, moe.expert_width), (4, 2, 32));
    }

    /// Qwen3_5MoeForConditionalGeneration's config: the text decoder from `text_config`
    /// (transformers' defaults under what it leaves out), run by onnxruntime-genai as
    /// `qwen3_5_moe_text`; its mrope_section read there.
    #[test]
    fn qwen3_5_image_text_configs_read_their_text_decoder() {
        let json = r#"{"model_type": "qwen3_5_moe", "tie_word_embeddings": false,
            "text_config": {"model_type": "qwen3_5_moe_text", "hidden_size": 64,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "head_dim": 16, "vocab_size": 300, "num_experts": 4, "num_experts_per_tok": 2,
            "moe_intermediate_size": 32, "rope_parameters": {"rope_type": "default",
            "rope_theta": 1e7, "partial_rotary_factor": 0.5, "mrope_section": [2, 1, 1]}},
            "vision_config": {"depth": 1}}"#;
        let c = crate::models::parse_config(json.as_bytes(), std::path::Path::new("c.json"));
        let c = c.unwrap();
        assert_eq!(
            (c.model_type.name, c.model_type.genai_type),
            ("qwen3_5_moe", Some("qwen3_5_moe_text"))
        );
        let text = c.knobs::<crate::models::multimodal::TextDecoder>().unwrap();
        let k = text.decoder.as_any().downcast_ref::<Qwen3Next>().unwrap();
        assert_eq!(
            (k.mrope, k.linear_layers.clone()),
            (Some([2, 1, 1]), vec![true, true])
        );
        assert_eq!(c.max_position_embeddings, 32768);
    }

    #[test]
    fn hostile_values_are_refused_by_name() {
        let cases = [
            (r#", "layer_types": ["linear_attention"]"#, "layer_types"),
            (
                r#", "layer_types": ["mamba", "mamba", "mamba", "mamba"]"#,
                "layer_types",
            ),
            (r#", "linear_num_value_heads": 3"#, "linear_num_value_heads"),
            (r#", "linear_num_key_heads": 0"#, "linear_num_key_heads"),
            (r#", "linear_conv_kernel_dim": 1"#, "linear_conv_kernel_dim"),
            (
                r#", "linear_value_head_dim": 1000000"#,
                "linear_value_head_dim",
            ),
            (
                r#", "full_attention_interval": 0"#,
                "full_attention_interval",
            ),
            (r#", "rms_norm_eps": -1"#, "rms_norm_eps"),
            (
                r#", "rope_parameters": {"mrope_section": [1, 2]}"#,
                "rope_parameters.mrope_section",
            ),
            (
                r#", "rope_parameters": {"mrope_section": [1, -2, 3]}"#,
                "rope_parameters.mrope_section",
            ),
            (
                r#", "rope_parameters": {"rope_type": "dynamic", "factor": 2.0}"#,
                "rope_parameters.rope_type",
            ),
            (
                r#", "num_experts": 4, "num_experts_per_tok": 5"#,
                "num_experts_per_tok",
            ),
        ];
        for (extra, field) in cases {
            let qwen3_5 = field.starts_with("rope_parameters");
            let err = match qwen3_5 {
                true => parse_as("qwen3_5_text", extra),
                false => parse(extra),
            }
            .unwrap_err();
            assert!(err.to_string().contains(field), "{extra}: {err}");
        }
    }
}
