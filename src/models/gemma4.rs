//! Gemma 4's text decoders: transformers' Gemma4ForCausalLM (`gemma4_text`) and
//! Gemma4UnifiedForCausalLM (`gemma4_unified_text`, the same layers without per-layer inputs or
//! experts, a window of 1024; its `use_bidirectional_attention` default `"vision"` concerns
//! image tokens, which a text-only decoder never sees).
//!
//! Gemma 3's sandwich-normed layers with: RMSNorms scaling by `weight` itself (not `1 +
//! weight`); attention unscaled (scale 1), queries and keys RMS-normed per head and values
//! RMS-normed per head without a gain (`v_norm`); full-attention layers with heads of their own
//! (`global_head_dim`, 512 by default, and where `attention_k_eq_v` says so
//! `num_global_key_value_heads`, their key projection serving as the values too) and their own
//! RoPE per layer type (sliding: default RoPE, theta 1e4; full: `proportional` RoPE, theta 1e6,
//! a `partial_rotary_factor` of 0.25 of each head's frequency pairs rotated, the others kept
//! still; both over the whole head); per-layer inputs (`hidden_size_per_layer_input`: a
//! second embedding table, one slice per layer, mixed with a projection of the embeddings and
//! gated into the residual stream after each layer's MLP); every layer's output times its
//! checkpoint's `layer_scalar`; an optional final-logit soft-cap.
//!
//! # The KV cache
//!
//! Each layer's cache has its own shape (`[batch, kv_heads, len, head_dim]` of its layer type),
//! as onnxruntime-genai's `gemma4_text` builder declares them. The last
//! `num_kv_shared_layers` layers compute no keys and values: each attends to those of the last
//! earlier layer of its type, so they carry no cache of their own ([`Family::kv_lender`]); the
//! caches are the first layers', `past_key_values.{0..n}`.

use serde_json::{Map, Value};

use super::components::{
    gated_mlp, linear, per_head_norm, rotary_embedding, scalar, DecoderInputs, GateActivation,
    Norm, NormKind, PerLayer, RopeTables,
};
use super::decoder::{Block, Family, LayerNorms};
use super::family::FamilySpec;
use crate::config::{
    read_decoder, read_layer_type_rope, sliding_layer_types, ArchConfig, Biases, DecoderFields,
    Fields, Gelu, HfConfig, ModelType, Rope, RopeScaling, Sign, SlidingLayers,
};
use crate::ir::{Attr, DType, GraphBuilder, Initializer, TensorSource};
use crate::limits::config::{MAX_HEADS, MAX_LAYERS, MAX_VOCAB, MAX_WIDTH};
use crate::Result;

/// The family's registry entry.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "gemma4",
    summary: "Gemma 3's layers with plain RMSNorm gains, unscaled attention over q/k/v-normed \
              heads, full layers with their own head size, key/value heads and proportional \
              RoPE (keys as values where `attention_k_eq_v`), per-layer input embeddings, \
              `layer_scalar`, the last layers reusing earlier layers' keys and values (no cache \
              of their own); `gemma4_unified_text`: without per-layer inputs",
    model_types: &[
        ModelType::generative("gemma4_text", "gemma4_text", |raw, t, f| {
            read(raw, t, f, Variant::Text)
        }),
        ModelType::generative("gemma4_unified_text", "gemma4_text", |raw, t, f| {
            read(raw, t, f, Variant::Unified)
        }),
    ],
};

/// Which of transformers' Gemma 4 text configs a config.json is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    /// Gemma4TextConfig: per-layer inputs and experts where configured.
    Text,
    /// Gemma4UnifiedTextConfig: neither.
    Unified,
}

const FULL: &str = "full_attention";
const SLIDING: &str = "sliding_attention";

/// transformers' Gemma4TextConfig: head_dim 256, `attention_bias` on q/k/v/o, no MLP bias,
/// tied embeddings, a window of 512 on the sliding layers (every layer but each sixth and the
/// last), `rms_norm_eps` 1e-6.
const FIELDS: DecoderFields = DecoderFields {
    head_dim: Some(256),
    biases: Biases::Configured { mlp_bias: false },
    silu_mlp: false,
    rope: |raw, head_dim, f| type_rope(raw, SLIDING, head_dim, f).map(|r| r.rope),
    tie_word_embeddings: true,
    sliding_window: Some(512),
    sliding_layers: SlidingLayers::Pattern(sliding_layers),
    ..DecoderFields::LLAMA
};

/// Gemma4UnifiedTextConfig: [`FIELDS`] with a window of 1024.
const UNIFIED_FIELDS: DecoderFields = DecoderFields {
    sliding_window: Some(1024),
    ..FIELDS
};

/// Per layer, whether it slides: `layer_types`, else all but every sixth; the last layer is
/// full whatever `layer_types` says (transformers forces it).
fn sliding_layers(raw: &HfConfig, layers: usize, f: &Fields<'_>) -> Result<Vec<bool>> {
    let mut sliding = sliding_layer_types(raw, layers, f)?
        .unwrap_or_else(|| (0..layers).map(|i| (i + 1) % 6 != 0).collect());
    if let Some(last) = sliding.last_mut() {
        *last = false;
    }
    Ok(sliding)
}

/// One layer type's RoPE: the parameters [`rotary_embedding`] takes (over the whole head) and
/// the inverse frequencies of its tables.
#[derive(Debug, Clone, PartialEq)]
pub struct TypeRope {
    /// The rotation's parameters.
    pub rope: Rope,
    /// `head_dim / 2` inverse frequencies (proportional RoPE: zeros past the rotated pairs).
    pub inv_freq: Vec<f32>,
}

/// The RoPE of `kind` layers, of `head_dim` channels per head: `rope_parameters.{kind}`
/// (Gemma4TextConfig's defaults when config.json has none: default RoPE with theta 1e4 for
/// sliding layers, proportional RoPE with theta 1e6 on a quarter of the pairs for full ones).
/// Default RoPE rotates every pair (transformers ignores a `partial_rotary_factor` there);
/// proportional RoPE rotates the first `⌊factor · head_dim / 2⌋` pairs with the frequencies
/// `theta^(−2j/head_dim)` divided by its `factor`.
fn type_rope(raw: &HfConfig, kind: &str, head_dim: usize, f: &Fields<'_>) -> Result<TypeRope> {
    let field = format!("rope_parameters.{kind}");
    let params = match &raw.rope_parameters {
        None | Some(Value::Null) => match kind {
            FULL => serde_json::json!({"rope_type": "proportional", "partial_rotary_factor": 0.25,
                "rope_theta": 1_000_000.0}),
            _ => serde_json::json!({"rope_type": "default", "rope_theta": 10_000.0}),
        },
        Some(Value::Object(map)) => match map.get(kind) {
            Some(p @ Value::Object(_)) => p.clone(),
            other => {
                let found = other.map_or("missing".to_string(), Value::to_string);
                return Err(f.err(
                    &field,
                    &format!("{found} (expected an object: Gemma 4 has one RoPE per layer type)"),
                ));
            }
        },
        Some(other) => {
            return Err(f.err("rope_parameters", &format!("{other} (expected an object)")))
        }
    };
    let Value::Object(mut p) = params else {
        unreachable!("the parameters are an object")
    };
    let rope_type = match p.get("rope_type") {
        None => "default".to_string(),
        Some(Value::String(t)) => t.clone(),
        Some(other) => {
            return Err(f.err(
                &format!("{field}.rope_type"),
                &format!("{other} (expected a string)"),
            ))
        }
    };
    match rope_type.as_str() {
        "default" => {
            p.remove("partial_rotary_factor");
            let rope = read_layer_type_rope(raw, Value::Object(p), kind, head_dim, 10_000.0, f)?;
            let inv_freq = rope.inv_freq();
            Ok(TypeRope { rope, inv_freq })
        }
        "proportional" => proportional(&p, &field, head_dim, f),
        other => Err(f.err(
            &format!("{field}.rope_type"),
            &format!(
                "`{other}` is not supported for gemma4_text (expected default or proportional)"
            ),
        )),
    }
}

/// Proportional RoPE from its parameters `p` (of config field `field`).
fn proportional(
    p: &Map<String, Value>,
    field: &str,
    head_dim: usize,
    f: &Fields<'_>,
) -> Result<TypeRope> {
    let number = |name: &str, default: Option<f64>, sign: Sign| -> Result<f32> {
        let full = format!("{field}.{name}");
        let value = f.json_number(&full, p.get(name))?;
        match default {
            None => f.required_number(&full, value, sign),
            Some(d) => f.number(&full, value, d, sign),
        }
    };
    let theta = number("rope_theta", None, Sign::Positive)?;
    let factor = number("factor", Some(1.0), Sign::Positive)?;
    let partial = number("partial_rotary_factor", Some(1.0), Sign::NonNegative)?;
    if partial > 1.0 {
        return Err(f.err(
            &format!("{field}.partial_rotary_factor"),
            &format!("{partial} (expected a fraction of at most 1)"),
        ));
    }
    let half = head_dim / 2;
    let angles = ((f64::from(partial) * head_dim as f64) as usize / 2).min(half);
    let dim = head_dim as f32;
    let inv_freq = (0..half)
        .map(|j| match j < angles {
            true => 1.0 / theta.powf((2 * j) as f32 / dim) / factor,
            false => 0.0,
        })
        .collect();
    let rope = Rope {
        theta,
        scaling: RopeScaling::Default,
        rotary_dim: 2 * half,
        interleaved: false,
    };
    Ok(TypeRope { rope, inv_freq })
}

/// The head size and key/value heads `per_layer_config` gives each layer it names (transformers
/// 5 writes the full layers' `head_dim` and `num_key_value_heads` there); other attributes are
/// refused.
fn per_layer_overrides(
    value: &Value,
    layers: usize,
    f: &Fields<'_>,
) -> Result<Vec<(Option<i64>, Option<i64>)>> {
    let field = "per_layer_config";
    let Value::Object(map) = value else {
        return Err(f.err(field, &format!("{value} (expected an object)")));
    };
    let mut out = vec![(None, None); layers];
    for (key, overrides) in map {
        let at = format!("{field}.{key}");
        let i = match key.parse::<usize>() {
            Ok(i) if i < layers => i,
            _ => return Err(f.err(&at, "is no layer index below num_hidden_layers")),
        };
        let Value::Object(o) = overrides else {
            return Err(f.err(&at, &format!("{overrides} (expected an object)")));
        };
        for (name, v) in o {
            let integer = f.json_integer(&format!("{at}.{name}"), Some(v))?;
            match name.as_str() {
                "head_dim" => out[i].0 = integer,
                "num_key_value_heads" => out[i].1 = integer,
                other => {
                    return Err(f.err(
                        &format!("{at}.{other}"),
                        "is not supported for gemma4_text (only head_dim and \
                         num_key_value_heads may differ per layer)",
                    ))
                }
            }
        }
    }
    Ok(out)
}

fn read(
    raw: &HfConfig,
    t: &'static ModelType,
    f: &Fields<'_>,
    variant: Variant,
) -> Result<ArchConfig> {
    let field = "use_bidirectional_attention";
    match &raw.use_bidirectional_attention {
        // "vision": image tokens attend both ways, which a text-only decoder never sees.
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if s == "vision" => {}
        Some(Value::String(s)) if s == "all" => {
            return Err(f.err(
                field,
                "\"all\" is not supported (mobius builds causal decoders)",
            ))
        }
        Some(other) => return Err(f.err(field, &format!("{other} (expected \"vision\" or null)"))),
    }
    if variant == Variant::Text && raw.enable_moe_block == Some(true) {
        return Err(f.err(
            "enable_moe_block",
            "true is not supported yet for gemma4_text (the experts beside each MLP are not built)",
        ));
    }
    let layers = f.positive("num_hidden_layers", raw.num_hidden_layers, MAX_LAYERS)?;
    let sliding = sliding_layers(raw, layers, f)?;
    let types = sliding
        .iter()
        .map(|&s| if s { SLIDING } else { FULL }.to_string())
        .collect();
    let raw = HfConfig {
        layer_types: Some(types),
        hidden_act: None,
        ..raw.clone()
    };
    let fields = match variant {
        Variant::Text => &FIELDS,
        Variant::Unified => &UNIFIED_FIELDS,
    };
    read_decoder(&raw, t, f, fields, |dims| {
        let heads = f.positive("num_attention_heads", raw.num_attention_heads, MAX_HEADS)?;
        let field = "num_key_value_heads";
        let kv = f.optional_count(field, raw.num_key_value_heads, heads, MAX_HEADS)?;
        let k_eq_v = raw.attention_k_eq_v.unwrap_or(false);
        let global_dim =
            f.optional_count("global_head_dim", raw.global_head_dim, 512, MAX_WIDTH)?;
        let global_kv = match raw.num_global_key_value_heads {
            Some(Some(n)) if k_eq_v => f.count("num_global_key_value_heads", n, MAX_HEADS)?,
            _ => kv,
        };
        let mut shapes: Vec<(usize, usize)> = sliding
            .iter()
            .map(|&s| match s {
                true => (kv, dims.head_dim),
                false => (global_kv, global_dim),
            })
            .collect();
        if let Some(overrides) = &raw.per_layer_config {
            shapes = sliding.iter().map(|_| (kv, dims.head_dim)).collect();
            for (i, (d, n)) in per_layer_overrides(overrides, layers, f)?
                .into_iter()
                .enumerate()
            {
                let at = format!("per_layer_config.{i}");
                if let Some(d) = d {
                    shapes[i].1 = f.count(&format!("{at}.head_dim"), d, MAX_WIDTH)?;
                }
                if let Some(n) = n {
                    shapes[i].0 = f.count(&format!("{at}.num_key_value_heads"), n, MAX_HEADS)?;
                }
            }
        }
        let mut type_dims: [Option<usize>; 2] = [None, None];
        for (i, &(n, d)) in shapes.iter().enumerate() {
            if heads % n != 0 {
                return Err(f.err(
                    "num_key_value_heads",
                    &format!(
                        "layer {i}'s {n} key/value heads must divide num_attention_heads = {heads}"
                    ),
                ));
            }
            let slot = &mut type_dims[usize::from(!sliding[i])];
            match slot {
                Some(other) if *other != d => {
                    return Err(f.err(
                        "per_layer_config",
                        "gives layers of one type different head sizes (transformers takes one \
                         RoPE per layer type)",
                    ))
                }
                _ => *slot = Some(d),
            }
        }
        let ropes = [
            type_dims[0]
                .map(|d| type_rope(&raw, SLIDING, d, f))
                .transpose()?,
            type_dims[1]
                .map(|d| type_rope(&raw, FULL, d, f))
                .transpose()?,
        ];
        let lenders = kv_lenders(raw.num_kv_shared_layers, &sliding, f)?;
        let field = "hidden_size_per_layer_input";
        let per_layer = match raw.hidden_size_per_layer_input {
            _ if variant == Variant::Unified => None,
            None => Some(256),
            Some(None) | Some(Some(0)) => None,
            Some(Some(n)) => Some(f.count(field, n, MAX_WIDTH)?),
        };
        let field = "vocab_size_per_layer_input";
        let per_layer_vocab =
            f.optional_count(field, raw.vocab_size_per_layer_input, 262_144, MAX_VOCAB)?;
        let gelu = Gelu::read(
            raw.hidden_activation.as_deref(),
            "gelu_pytorch_tanh",
            "hidden_activation",
            f,
        )?;
        let field = "final_logit_softcapping";
        let final_softcap = match f.json_number(field, raw.final_logit_softcapping.as_ref())? {
            None => None,
            Some(c) => Some(f.number(field, Some(c), c, Sign::Positive)?),
        };
        Ok(Gemma4 {
            gelu,
            embed_scale: (dims.hidden_size as f64).sqrt() as f32,
            sliding,
            shapes,
            k_eq_v,
            ropes,
            lenders,
            double_wide: raw.use_double_wide_mlp.unwrap_or(false),
            per_layer,
            per_layer_vocab,
            final_softcap,
        })
    })
}

/// Per layer, the earlier layer whose keys and values it reuses: the last
/// `num_kv_shared_layers` (`shared`) layers each reuse those of the last earlier layer of its
/// type (`sliding` per layer), which must exist (Gemma 4, Gemma 3n).
pub fn kv_lenders(
    shared: Option<i64>,
    sliding: &[bool],
    f: &Fields<'_>,
) -> Result<Vec<Option<usize>>> {
    let layers = sliding.len();
    let field = "num_kv_shared_layers";
    let shared = match shared {
        None => 0,
        Some(n) => f.index(field, n, MAX_LAYERS)?,
    };
    if shared >= layers {
        return Err(f.err(
            field,
            &format!("{shared} (expected fewer than num_hidden_layers = {layers}: some layer must compute keys and values)"),
        ));
    }
    let first_shared = layers - shared;
    let mut lenders = vec![None; layers];
    for i in first_shared..layers {
        let lender = (0..first_shared).rev().find(|&j| sliding[j] == sliding[i]);
        match lender {
            Some(j) => lenders[i] = Some(j),
            None => {
                return Err(f.err(
                    field,
                    &format!(
                        "{shared}: layer {i} reuses the keys and values of an earlier layer \
                         of its type, and none of the first {first_shared} layers is one"
                    ),
                ))
            }
        }
    }
    Ok(lenders)
}

/// The names under which layer `j`'s keys and values are kept for the layers reusing them.
fn lent_kv(j: usize) -> (String, String) {
    (
        format!("model.layers.{j}.self_attn.lent_key"),
        format!("model.layers.{j}.self_attn.lent_value"),
    )
}

/// The index of the layer whose attention module is `attn` (`model.layers.{i}.self_attn`).
fn layer_of(attn: &str) -> usize {
    attn.rsplit('.')
        .nth(1)
        .and_then(|i| i.parse().ok())
        .expect("an attention module is model.layers.{i}.self_attn")
}

/// Gemma 4's knobs and hooks.
#[derive(Debug, Clone, PartialEq)]
pub struct Gemma4 {
    /// The MLP (and per-layer gate) activation, `hidden_activation`.
    pub gelu: Gelu,
    /// `sqrt(hidden_size)`, the embeddings' factor (rounded to the model dtype).
    pub embed_scale: f32,
    /// Per layer, whether it is a `sliding_attention` layer.
    pub sliding: Vec<bool>,
    /// Per layer, its key/value heads and head size.
    pub shapes: Vec<(usize, usize)>,
    /// `attention_k_eq_v`: the full layers' keys are their values.
    pub k_eq_v: bool,
    /// The RoPE of the sliding and of the full layers, where some layer is of that type.
    pub ropes: [Option<TypeRope>; 2],
    /// Per layer, the earlier layer whose keys and values it reuses (`num_kv_shared_layers`).
    pub lenders: Vec<Option<usize>>,
    /// `use_double_wide_mlp`: the reusing layers' MLPs are twice `intermediate_size` wide.
    pub double_wide: bool,
    /// `hidden_size_per_layer_input`, where the layers take per-layer inputs.
    pub per_layer: Option<usize>,
    /// `vocab_size_per_layer_input`.
    pub per_layer_vocab: usize,
    /// `final_logit_softcapping`.
    pub final_softcap: Option<f32>,
}

impl Gemma4 {
    /// Whether some later layer reuses layer `j`'s keys and values.
    fn lends(&self, j: usize) -> bool {
        self.lenders.contains(&Some(j))
    }

    /// The per-layer inputs' shape and norm, `p` wide.
    fn per_layer_spec(&self, cfg: &ArchConfig, p: usize) -> PerLayer {
        PerLayer {
            hidden: cfg.hidden_size,
            layers: cfg.num_hidden_layers,
            width: p,
            vocab: self.per_layer_vocab,
            norm: self.norm(cfg),
        }
    }

    /// The RoPE tables of `rope` under `prefix`, gathered by `position_ids`.
    fn tables(
        b: &mut GraphBuilder,
        prefix: &str,
        rope: &TypeRope,
        positions: usize,
        position_ids: &str,
        dtype: DType,
    ) -> RopeTables {
        let half = rope.inv_freq.len();
        let mut cache = |name: &str, sine: bool| {
            let init = b.initializer(Initializer {
                name: format!("{prefix}.{name}"),
                dtype,
                shape: vec![positions, half],
                source: Some(TensorSource::RotaryTable {
                    inv_freq: rope.inv_freq.clone(),
                    positions,
                    sine,
                }),
            });
            b.op(
                "Gather",
                &[&init, position_ids],
                vec![("axis", Attr::Int(0))],
            )
        };
        RopeTables {
            cos: cache("cos_cache", false),
            sin: cache("sin_cache", true),
        }
    }
}

impl Family for Gemma4 {
    fn layer_norms(&self) -> LayerNorms {
        // The MLP block norms its own input ([`Family::layer_mlp`]).
        LayerNorms {
            pre_mlp: None,
            ..LayerNorms::SANDWICH
        }
    }

    /// The embeddings times `sqrt(hidden_size)`; the per-layer inputs computed from them.
    fn embed(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        io: &DecoderInputs,
        x: String,
        dtype: DType,
    ) -> String {
        let scale = scalar(b, self.embed_scale, dtype);
        let x = b.op("Mul", &[&x, &scale], vec![]);
        if let Some(p) = self.per_layer {
            let ids = &io.input_ids;
            self.per_layer_spec(cfg, p).inputs(b, ids, &x, dtype);
        }
        x
    }

    /// The full layers' tables `model.rotary_emb.*` (index 0), then the sliding layers'
    /// `model.rotary_emb_local.*` (index 1), where some layer is of that type.
    fn rotary(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        io: &DecoderInputs,
        dtype: DType,
    ) -> Vec<RopeTables> {
        let positions = cfg.max_position_embeddings;
        let ids = &io.position_ids;
        let [sliding, full] = &self.ropes;
        let mut tables = vec![];
        if let Some(rope) = full {
            tables.push(Self::tables(
                b,
                "model.rotary_emb",
                rope,
                positions,
                ids,
                dtype,
            ));
        }
        if let Some(rope) = sliding {
            let prefix = "model.rotary_emb_local";
            tables.push(Self::tables(b, prefix, rope, positions, ids, dtype));
        }
        tables
    }

    fn layer_rope<'c>(&'c self, _cfg: &'c ArchConfig, i: usize) -> Option<(&'c Rope, usize)> {
        let [sliding, full] = &self.ropes;
        match self.sliding[i] {
            true => sliding
                .as_ref()
                .map(|r| (&r.rope, usize::from(full.is_some()))),
            false => full.as_ref().map(|r| (&r.rope, 0)),
        }
    }

    fn layer_kv_shape(&self, _cfg: &ArchConfig, i: usize) -> (usize, usize) {
        self.shapes[i]
    }

    fn kv_lender(&self, _cfg: &ArchConfig, i: usize) -> Option<usize> {
        self.lenders[i]
    }

    /// q projected, normed per head and rotated; k and v the same way (v normed without a
    /// gain, not rotated; k's projection before its norm where the keys are the values), or
    /// the lender's, which a lending layer keeps under [`lent_kv`]'s names.
    fn attention_qkv(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        attn: &str,
        i: usize,
        rotary: &[RopeTables],
        spec: &super::components::AttentionSpec<'_>,
        dtype: DType,
    ) -> [String; 3] {
        let (h, bias) = (cfg.hidden_size, cfg.qkv_bias);
        let (kv, d) = self.shapes[i];
        let heads = spec.q_heads;
        let norm = self.norm(cfg);
        let rope = self.layer_rope(cfg, i);
        let q = linear(b, x, &format!("{attn}.q_proj"), h, heads * d, bias, dtype);
        let q_norm = format!("{attn}.q_norm");
        let mut q = per_head_norm(b, norm, &q, &q_norm, heads as i64, d, dtype);
        if let Some((rope, t)) = rope {
            q = rotary_embedding(b, &q, &rotary[t], rope, heads, d);
        }
        if let Some(j) = self.lenders[i] {
            let (k, v) = lent_kv(j);
            return [q, k, v];
        }
        let k = linear(b, x, &format!("{attn}.k_proj"), h, kv * d, bias, dtype);
        let v = match self.k_eq_v && !self.sliding[i] {
            true => k.clone(),
            false => linear(b, x, &format!("{attn}.v_proj"), h, kv * d, bias, dtype),
        };
        let k_norm = format!("{attn}.k_norm");
        let mut k = per_head_norm(b, norm, &k, &k_norm, kv as i64, d, dtype);
        if let Some((rope, t)) = rope {
            k = rotary_embedding(b, &k, &rotary[t], rope, kv, d);
        }
        let plain = Norm {
            kind: NormKind::PlainRms,
            eps: cfg.rms_norm_eps,
        };
        let v_norm = format!("{attn}.v_norm");
        let mut v = per_head_norm(b, plain, &v, &v_norm, kv as i64, d, dtype);
        if self.lends(i) {
            let (lent_k, lent_v) = lent_kv(i);
            b.op_into("Identity", &[&k], vec![], &lent_k);
            b.op_into("Identity", &[&v], vec![], &lent_v);
            (k, v) = (lent_k, lent_v);
        }
        [q, k, v]
    }

    fn norm(&self, cfg: &ArchConfig) -> Norm {
        Norm {
            kind: NormKind::Rms,
            eps: cfg.rms_norm_eps,
        }
    }

    /// Queries and keys are normed: no scaling.
    fn attention_scale(&self, _cfg: &ArchConfig) -> f32 {
        1.0
    }

    /// `o_proj` from the layer's heads of its own size.
    fn o_proj(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        y: &str,
        attn: &str,
        dtype: DType,
    ) -> String {
        let d = self.shapes[layer_of(attn)].1;
        let width = cfg.num_attention_heads * d;
        let o_proj = format!("{attn}.o_proj");
        linear(b, y, &o_proj, width, cfg.hidden_size, cfg.o_bias, dtype)
    }

    /// `pre_feedforward_layernorm`, then the GELU-gated MLP (twice as wide in the reusing
    /// layers with `use_double_wide_mlp`).
    fn layer_mlp(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        layer: &str,
        i: usize,
        dtype: DType,
    ) -> String {
        let h = cfg.hidden_size;
        let pre = format!("{layer}.pre_feedforward_layernorm");
        let x = self.norm(cfg).apply(b, x, &pre, h, dtype);
        let wide = self.double_wide && self.lenders[i].is_some();
        let width = cfg.intermediate_size * if wide { 2 } else { 1 };
        let act = GateActivation::Gelu(self.gelu);
        gated_mlp(
            b,
            &x,
            &format!("{layer}.mlp"),
            (h, width),
            false,
            act,
            dtype,
        )
    }

    /// After the MLP block: the per-layer block, then the whole times `{layer}.layer_scalar`.
    fn residual_add(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        y: &str,
        (layer, i): (&str, usize),
        block: Block,
        dtype: DType,
    ) -> String {
        let sum = b.op("Add", &[x, y], vec![]);
        if block == Block::Attention {
            return sum;
        }
        let out = match self.per_layer {
            Some(p) => {
                let spec = self.per_layer_spec(cfg, p);
                let gated = spec.gated(b, &sum, (layer, i), self.gelu, dtype);
                b.op("Add", &[&sum, &gated], vec![])
            }
            None => sum,
        };
        let name = format!("{layer}.layer_scalar");
        let layer_scalar = b.initializer(Initializer {
            name: name.clone(),
            dtype,
            shape: vec![1],
            source: Some(TensorSource::Checkpoint(name)),
        });
        b.op("Mul", &[&out, &layer_scalar], vec![])
    }

    /// `cap · tanh(x @ head / cap)` when the final logits are soft-capped.
    fn logits(&self, b: &mut GraphBuilder, _cfg: &ArchConfig, x: &str, head: &str, dtype: DType) {
        super::decoder::soft_capped_logits(b, x, head, self.final_softcap, dtype);
    }
}

#[cfg(test)]
mod tests {
    use super::Gemma4;
    use crate::config::ArchConfig;

    fn parse(extra: &str) -> crate::Result<ArchConfig> {
        crate::models::parse_fields(
            r#""model_type": "gemma4_text", "hidden_size": 64, "intermediate_size": 128,
            "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 7,
            "vocab_size": 300, "max_position_embeddings": 4096"#,
            extra,
        )
    }

    #[test]
    fn defaults_follow_transformers() {
        let c = parse("").unwrap();
        let k = c.knobs::<Gemma4>().unwrap();
        assert_eq!(k.sliding, [true, true, true, true, true, false, false]);
        assert_eq!(c.layer_windows[0], Some(512));
        assert_eq!((k.shapes[0], k.shapes[5]), ((2, 256), (2, 512)));
        assert_eq!((k.per_layer, k.per_layer_vocab), (Some(256), 262_144));
        assert!(c.tie_word_embeddings && k.final_softcap.is_none());
        let [sliding, full] = &k.ropes;
        let (sliding, full) = (sliding.as_ref().unwrap(), full.as_ref().unwrap());
        assert_eq!((sliding.rope.theta, sliding.inv_freq.len()), (1e4, 128));
        // Proportional: 64 of 256 pairs turn, with the frequencies of the whole head.
        assert_eq!((full.rope.rotary_dim, full.inv_freq.len()), (512, 256));
        assert_eq!(full.inv_freq.iter().filter(|&&f| f > 0.0).count(), 64);
        let want = 1.0 / 1e6f32.powf(2.0 / 512.0);
        assert_eq!(full.inv_freq[1], want);
        assert!(k.lenders.iter().all(Option::is_none));
        let c = parse(
            r#", "attention_k_eq_v": true, "num_global_key_value_heads": 1,
            "num_kv_shared_layers": 3, "hidden_size_per_layer_input": null,
            "use_bidirectional_attention": "vision", "layer_types": ["sliding_attention",
            "full_attention", "sliding_attention", "full_attention", "sliding_attention",
            "sliding_attention", "sliding_attention"]"#,
        )
        .unwrap();
        let k = c.knobs::<Gemma4>().unwrap();
        // The last layer is full whatever layer_types says.
        assert_eq!((k.shapes[6], k.shapes[5]), ((1, 512), (2, 256)));
        assert_eq!(k.lenders[4..], [Some(2), Some(2), Some(3)]);
        assert_eq!(k.per_layer, None);
        let c = parse(r#", "per_layer_config": {"5": {"head_dim": 32}, "6": {"head_dim": 32}}"#)
            .unwrap();
        let k = c.knobs::<Gemma4>().unwrap();
        assert_eq!((k.shapes[4], k.shapes[5]), ((2, 256), (2, 32)));
    }

    #[test]
    fn unified_has_no_per_layer_inputs_and_a_wider_window() {
        let c = crate::models::parse_fields(
            r#""model_type": "gemma4_unified_text", "hidden_size": 64, "intermediate_size": 128,
            "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
            "vocab_size": 300, "max_position_embeddings": 4096, "hidden_size_per_layer_input": 8,
            "enable_moe_block": true"#,
            "",
        )
        .unwrap();
        let k = c.knobs::<Gemma4>().unwrap();
        assert_eq!((k.per_layer, c.layer_windows[0]), (None, Some(1024)));
    }

    #[test]
    fn refuses_what_it_cannot_build() {
        for (extra, field) in [
            (
                r#", "use_bidirectional_attention": "all""#,
                "use_bidirectional_attention",
            ),
            (r#", "enable_moe_block": true"#, "enable_moe_block"),
            (r#", "num_kv_shared_layers": 7"#, "num_kv_shared_layers"),
            (r#", "num_kv_shared_layers": 2"#, "num_kv_shared_layers"),
            (
                r#", "per_layer_config": {"1": {"intermediate_size": 8}}"#,
                "per_layer_config",
            ),
            (
                r#", "per_layer_config": {"5": {"head_dim": 32}}"#,
                "per_layer_config",
            ),
            (
                r#", "rope_parameters": {"full_attention": {"rope_type": "yarn"},
                "sliding_attention": {"rope_theta": 1e4}}"#,
                "rope_parameters.full_attention.rope_type",
            ),
            (
                r#", "rope_parameters": {"rope_theta": 1e4}"#,
                "rope_parameters",
            ),
        ] {
            let err = parse(extra).unwrap_err().to_string();
            assert!(err.contains(field), "{extra}: {err}");
        }
    }
}
