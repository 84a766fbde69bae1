//! Gemma 3n's text decoder: transformers' Gemma3nForCausalLM (`gemma3n_text`).
//!
//! Gemma 4's attention (RMSNorm gains used as they are, unscaled attention over per-head
//! normed q, k and v, the last `num_kv_shared_layers` layers reusing the keys and values of
//! the last earlier layer of their type, one RoPE per layer type) in Gemma 3's sandwich-normed
//! layers, with:
//! - AltUp: `altup_num_inputs` streams of the hidden state (the embeddings and their
//!   projections, rescaled to the embeddings' RMS magnitude); each layer predicts every
//!   stream from a routed mix of all of them, computes on the active one's prediction, and
//!   corrects the predictions by how far it moved it; at the end, the streams' unembedding
//!   projections (rescaled to the first stream's magnitude) are averaged
//!   ([`super::components::altup`]);
//! - LAuReL: a normed low-rank projection of the attention input, added beside the attention
//!   and averaged with it (`/ sqrt(2)`);
//! - activation sparsity: the MLP gates of the layers `activation_sparsity_pattern` names
//!   keep only what lies above `mean + std · Φ⁻¹(sparsity)` (a constant computed here), shifted
//!   down by that cutoff ([`gaussian_top_k`]);
//! - per-layer inputs as Gemma 4's ([`PerLayer`]; token ids outside their table read row 0),
//!   each layer's gated into the streams but the first, from its corrected active stream
//!   (times `correct_output_scale` where `altup_correct_scale`);
//! - final logits soft-capped (`final_logit_softcapping`, 30 by default).
//!
//! AltUp's `altup_coef_clip` clamps its coefficients during training only; inference, and so
//! this graph, uses them as they are.

use serde_json::Value;

use super::components::{
    altup::laurel, gaussian_top_k, gelu, linear, normal_quantile, scalar, AltUp, AttentionSpec,
    DecoderInputs, Norm, NormKind, PerLayer, RopeTables,
};
use super::decoder::{soft_capped_logits, Block, Family, LayerNorms};
use super::family::FamilySpec;
use super::gemma::gemma3_rope;
use super::gemma4::{kv_lenders, Gemma4, TypeRope};
use crate::config::{
    read_decoder, sliding_layer_types, ArchConfig, Biases, DecoderFields, Fields, Gelu, HfConfig,
    ModelType, Rope, RopeScaling, Sign, SlidingLayers,
};
use crate::ir::{DType, GraphBuilder, Initializer, TensorSource};
use crate::limits::config::{MAX_HEADS, MAX_LAYERS, MAX_VOCAB, MAX_WIDTH};
use crate::Result;

/// The family's registry entry.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "gemma3n",
    summary: "Gemma 4's q/k/v-normed attention and KV sharing in sandwich-normed layers, with \
              AltUp (several hidden-state streams, predicted and corrected by routed \
              coefficients around each layer), a LAuReL low-rank residual, Gaussian top-k \
              activation sparsity on the first layers' MLP gates, per-layer input embeddings \
              and soft-capped logits",
    model_types: &[ModelType::generative("gemma3n_text", "decoder", read)],
};

const FULL: &str = "full_attention";
const SLIDING: &str = "sliding_attention";

/// transformers' Gemma3nTextConfig: head_dim 256, `attention_bias` on q/k/v/o, no MLP bias,
/// tied embeddings, a window of 512 on the sliding layers (all but every fifth),
/// `rms_norm_eps` 1e-6.
const FIELDS: DecoderFields = DecoderFields {
    head_dim: Some(256),
    biases: Biases::Configured { mlp_bias: false },
    silu_mlp: false,
    rope: |raw, head_dim, f| gemma3_rope(raw, head_dim, FULL, f),
    tie_word_embeddings: true,
    sliding_window: Some(512),
    sliding_layers: SlidingLayers::Pattern(sliding_layers),
    ..DecoderFields::LLAMA
};

/// Per layer, whether it slides: `layer_types`, else all but every fifth.
fn sliding_layers(raw: &HfConfig, layers: usize, f: &Fields<'_>) -> Result<Vec<bool>> {
    Ok(sliding_layer_types(raw, layers, f)?
        .unwrap_or_else(|| (0..layers).map(|i| (i + 1) % 5 != 0).collect()))
}

/// The RoPE of `kind` layers (Gemma 3's reading: theta 1e6 for full layers, 1e4 or
/// `rope_local_base_freq` for sliding ones) with its tables' inverse frequencies; RoPE types
/// whose tables are not their inverse frequencies alone are refused.
fn type_rope(raw: &HfConfig, kind: &str, head_dim: usize, f: &Fields<'_>) -> Result<TypeRope> {
    let rope = gemma3_rope(raw, head_dim, kind, f)?;
    match rope.scaling {
        RopeScaling::Default | RopeScaling::Linear { .. } => {}
        _ => {
            return Err(f.err(
                &format!("rope_parameters.{kind}.rope_type"),
                "is not supported for gemma3n_text (expected default or linear)",
            ))
        }
    }
    let inv_freq = rope.inv_freq();
    Ok(TypeRope { rope, inv_freq })
}

/// Per layer, the standard normal quantile of its `activation_sparsity_pattern` share, where
/// it is sparse (transformers' default: 0.95 on the first 10 layers of a model of more than
/// 10, none otherwise).
fn sparsity(raw: &HfConfig, layers: usize, f: &Fields<'_>) -> Result<Vec<Option<f32>>> {
    let field = "activation_sparsity_pattern";
    let shares = match &raw.activation_sparsity_pattern {
        None | Some(Value::Null) => {
            let sparse = if layers > 10 { 10 } else { 0 };
            (0..layers)
                .map(|i| if i < sparse { 0.95 } else { 0.0 })
                .collect()
        }
        Some(Value::Array(values)) if values.len() == layers => values
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let at = format!("{field}.{i}");
                match f.json_number(&at, Some(v))? {
                    Some(s) if (0.0..1.0).contains(&s) => Ok(s),
                    _ => Err(f.err(&at, &format!("{v} (expected a share in [0, 1))"))),
                }
            })
            .collect::<Result<Vec<f64>>>()?,
        Some(other) => {
            return Err(f.err(
                field,
                &format!("{other} (expected a list of {layers} shares, one per layer)"),
            ))
        }
    };
    Ok(shares
        .into_iter()
        .map(|s| (s > 0.0).then(|| normal_quantile(s) as f32))
        .collect())
}

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
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
    read_decoder(&raw, t, f, &FIELDS, |dims| {
        let (h, d) = (dims.hidden_size, dims.head_dim);
        let kv = match raw.num_key_value_heads {
            None => f.positive("num_attention_heads", raw.num_attention_heads, MAX_HEADS)?,
            some => f.positive("num_key_value_heads", some, MAX_HEADS)?,
        };
        let has = |s: bool| sliding.contains(&s);
        let ropes = [
            has(true)
                .then(|| type_rope(&raw, SLIDING, d, f))
                .transpose()?,
            has(false)
                .then(|| type_rope(&raw, FULL, d, f))
                .transpose()?,
        ];
        let shared = Some(raw.num_kv_shared_layers.unwrap_or(15));
        let lenders = kv_lenders(shared, &sliding, f)?;
        let gelu = Gelu::read(
            raw.hidden_activation.as_deref(),
            "gelu_pytorch_tanh",
            "hidden_activation",
            f,
        )?;
        let field = "final_logit_softcapping";
        let final_softcap = match f.json_number(field, raw.final_logit_softcapping.as_ref())? {
            None if raw.final_logit_softcapping.is_none() => Some(30.0),
            None => None,
            Some(c) => Some(f.number(field, Some(c), c, Sign::Positive)?),
        };
        let norm = Norm {
            kind: NormKind::Rms,
            eps: f.number("rms_norm_eps", raw.rms_norm_eps, 1e-6, Sign::Positive)?,
        };
        let field = "hidden_size_per_layer_input";
        let width = match raw.hidden_size_per_layer_input {
            None => 256,
            Some(Some(n)) => f.count(field, n, MAX_WIDTH)?,
            Some(None) => {
                return Err(f.err(field, "null (Gemma 3n's layers take per-layer inputs)"))
            }
        };
        let field = "vocab_size_per_layer_input";
        let vocab = f.optional_count(field, raw.vocab_size_per_layer_input, 262_144, MAX_VOCAB)?;
        let streams = f.optional_count("altup_num_inputs", raw.altup_num_inputs, 4, MAX_WIDTH)?;
        let field = "altup_active_idx";
        let active = match raw.altup_active_idx {
            None => 0,
            Some(a) => f.index(field, a, MAX_WIDTH)?,
        };
        if active >= streams {
            return Err(f.err(
                field,
                &format!("{active} (expected a stream below altup_num_inputs = {streams})"),
            ));
        }
        let laurel_rank = f.optional_count("laurel_rank", raw.laurel_rank, 64, MAX_WIDTH)?;
        Ok(Gemma3n {
            attention: Gemma4 {
                gelu,
                embed_scale: (h as f64).sqrt() as f32,
                sliding: sliding.clone(),
                shapes: vec![(kv, d); layers],
                k_eq_v: false,
                ropes,
                lenders,
                double_wide: false,
                per_layer: None,
                per_layer_vocab: vocab,
                final_softcap,
            },
            altup: AltUp {
                streams,
                active,
                hidden: h,
                eps: norm.eps,
            },
            correct_scale: raw.altup_correct_scale.unwrap_or(true),
            laurel_rank,
            per_layer: PerLayer {
                hidden: h,
                layers,
                width,
                vocab,
                norm,
            },
            sparsity: sparsity(&raw, layers, f)?,
        })
    })
}

/// Gemma 3n's knobs and hooks.
#[derive(Debug, Clone, PartialEq)]
pub struct Gemma3n {
    /// The attention, RoPE and KV sharing, as Gemma 4 builds them (uniform heads, no keys as
    /// values, no per-layer inputs of its own), with the activation, embedding scale and
    /// final soft-cap.
    pub attention: Gemma4,
    /// The AltUp streams.
    pub altup: AltUp,
    /// `altup_correct_scale`.
    pub correct_scale: bool,
    /// `laurel_rank`.
    pub laurel_rank: usize,
    /// The per-layer inputs.
    pub per_layer: PerLayer,
    /// Per layer, the standard normal quantile of its MLP gates' sparsity, where sparse.
    pub sparsity: Vec<Option<f32>>,
}

/// The layer module of attention module `attn` (`{layer}.self_attn`).
fn layer_of(attn: &str) -> &str {
    attn.strip_suffix(".self_attn")
        .expect("an attention module is {layer}.self_attn")
}

/// The name under which layer `layer` keeps its AltUp predictions for its correction.
fn predictions(layer: &str) -> String {
    format!("{layer}.altup.predictions")
}

/// The name under which layer `layer` keeps its LAuReL output for its attention's residual.
fn laurel_output(layer: &str) -> String {
    format!("{layer}.laurel.output")
}

impl Family for Gemma3n {
    fn layer_norms(&self) -> LayerNorms {
        LayerNorms::SANDWICH
    }

    fn norm(&self, cfg: &ArchConfig) -> Norm {
        self.attention.norm(cfg)
    }

    /// The streams collapse into the final norm in [`Family::logits`].
    fn final_norm(&self) -> bool {
        false
    }

    /// The embeddings times `sqrt(hidden_size)`, the per-layer inputs computed from them,
    /// and the AltUp streams `[B, S, streams, H]` expanded from them.
    fn embed(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        io: &DecoderInputs,
        x: String,
        dtype: DType,
    ) -> String {
        let scale = scalar(b, self.attention.embed_scale, dtype);
        let x = b.op("Mul", &[&x, &scale], vec![]);
        let ids = match self.per_layer.vocab < cfg.vocab_size {
            // transformers reads row 0 for the ids outside the per-layer table.
            true => {
                let rows = b.const_i64(&[self.per_layer.vocab as i64]);
                let inside = b.op("Less", &[&io.input_ids, &rows], vec![]);
                let zero = b.const_i64(&[0]);
                b.op("Where", &[&inside, &io.input_ids, &zero], vec![])
            }
            false => io.input_ids.clone(),
        };
        self.per_layer.inputs(b, &ids, &x, dtype);
        self.altup.expand(b, &x, "model.altup_projections", dtype)
    }

    fn rotary(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        io: &DecoderInputs,
        dtype: DType,
    ) -> Vec<RopeTables> {
        self.attention.rotary(b, cfg, io, dtype)
    }

    fn layer_rope<'c>(&'c self, cfg: &'c ArchConfig, i: usize) -> Option<(&'c Rope, usize)> {
        self.attention.layer_rope(cfg, i)
    }

    fn kv_lender(&self, cfg: &ArchConfig, i: usize) -> Option<usize> {
        self.attention.kv_lender(cfg, i)
    }

    /// The AltUp predictions of the streams `x` (kept for the correction); the layer computes
    /// on the active stream's.
    fn layer_input(
        &self,
        b: &mut GraphBuilder,
        _cfg: &ArchConfig,
        x: &str,
        (layer, _): (&str, usize),
        dtype: DType,
    ) -> String {
        let predicted = self.altup.predict(b, x, &format!("{layer}.altup"), dtype);
        let kept = predictions(layer);
        b.op_into("Identity", &[&predicted], vec![], &kept);
        self.altup.stream(b, &kept, self.altup.active)
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
        self.attention
            .attention_qkv(b, cfg, x, attn, i, rotary, spec, dtype)
    }

    /// Queries and keys are normed: no scaling.
    fn attention_scale(&self, cfg: &ArchConfig) -> f32 {
        self.attention.attention_scale(cfg)
    }

    /// `o_proj` of `y`; beside it, the LAuReL of the attention input `x`, kept for the
    /// residual ([`Family::residual_add`]).
    fn attention_output(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        y: &str,
        attn: &str,
        _spec: &AttentionSpec<'_>,
        dtype: DType,
    ) -> String {
        let layer = layer_of(attn);
        let sizes = (cfg.hidden_size, self.laurel_rank);
        let norm = self.norm(cfg);
        let laureled = laurel(b, x, &format!("{layer}.laurel"), sizes, norm, dtype);
        b.op_into("Identity", &[&laureled], vec![], &laurel_output(layer));
        self.attention.o_proj(b, cfg, y, attn, dtype)
    }

    /// The GELU-gated MLP, its gate sparsified by a Gaussian top-k where the layer is sparse.
    fn layer_mlp(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        layer: &str,
        i: usize,
        dtype: DType,
    ) -> String {
        let (h, w) = (cfg.hidden_size, cfg.intermediate_size);
        let mlp = format!("{layer}.mlp");
        let gate = linear(b, x, &format!("{mlp}.gate_proj"), h, w, false, dtype);
        let gate = match self.sparsity[i] {
            Some(multiplier) => gaussian_top_k(b, &gate, multiplier, dtype),
            None => gate,
        };
        let gate = gelu(b, &gate, self.attention.gelu);
        let up = linear(b, x, &format!("{mlp}.up_proj"), h, w, false, dtype);
        let product = b.op("Mul", &[&gate, &up], vec![]);
        linear(b, &product, &format!("{mlp}.down_proj"), w, h, false, dtype)
    }

    /// After attention: `(x + y + laurel) / sqrt(2)`. After the MLP: the layer's predictions
    /// corrected by `x + y`, then its per-layer input, gated by the corrected active stream
    /// (scaled by `correct_output_scale`), added to every stream but the first.
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
            let with_laurel = b.op("Add", &[&sum, &laurel_output(layer)], vec![]);
            let root2 = scalar(b, std::f32::consts::SQRT_2, dtype);
            return b.op("Div", &[&with_laurel, &root2], vec![]);
        }
        let module = format!("{layer}.altup");
        let corrected = self
            .altup
            .correct(b, &predictions(layer), &sum, &module, dtype);
        let mut first = self.altup.stream(b, &corrected, self.altup.active);
        if self.correct_scale {
            let name = format!("{module}.correct_output_scale");
            let scale = b.initializer(Initializer {
                name: name.clone(),
                dtype,
                shape: vec![cfg.hidden_size],
                source: Some(TensorSource::Checkpoint(name)),
            });
            first = b.op("Mul", &[&first, &scale], vec![]);
        }
        let gated = self
            .per_layer
            .gated(b, &first, (layer, i), self.attention.gelu, dtype);
        self.altup.add_to_others(b, &corrected, &gated, dtype)
    }

    /// The streams collapsed, `model.norm`, the LM head and the soft-cap.
    fn logits(&self, b: &mut GraphBuilder, cfg: &ArchConfig, x: &str, head: &str, dtype: DType) {
        let collapsed = self
            .altup
            .collapse(b, x, "model.altup_unembed_projections", dtype);
        let h = cfg.hidden_size;
        let normed = self.norm(cfg).apply(b, &collapsed, "model.norm", h, dtype);
        soft_capped_logits(b, &normed, head, self.attention.final_softcap, dtype);
    }
}

#[cfg(test)]
mod tests {
    use super::Gemma3n;
    use crate::config::ArchConfig;

    fn parse(extra: &str) -> crate::Result<ArchConfig> {
        crate::models::parse_fields(
            r#""model_type": "gemma3n_text", "hidden_size": 64, "intermediate_size": [128, 128,
            128, 128, 128, 128, 128, 128, 128, 128, 128, 128], "num_attention_heads": 4,
            "num_key_value_heads": 2, "num_hidden_layers": 12, "vocab_size": 300,
            "max_position_embeddings": 4096"#,
            extra,
        )
    }

    #[test]
    fn defaults_follow_transformers() {
        let c = parse(r#", "num_kv_shared_layers": 4"#).unwrap();
        let k = c.knobs::<Gemma3n>().unwrap();
        assert_eq!(c.intermediate_size, 128);
        assert_eq!(c.head_dim, 256);
        let full: Vec<usize> = (0..12).filter(|&i| !k.attention.sliding[i]).collect();
        assert_eq!(full, [4, 9]);
        assert_eq!(c.layer_windows[0], Some(512));
        // The last 4 layers reuse the last earlier sliding (7) and full (4) layers' caches.
        assert_eq!(
            k.attention.lenders[8..],
            [Some(7), Some(4), Some(7), Some(7)]
        );
        let quantile = 1.644_853_6_f32;
        assert_eq!(k.sparsity[..10], [Some(quantile); 10]);
        assert_eq!(k.sparsity[10..], [None, None]);
        assert_eq!((k.altup.streams, k.altup.active, k.laurel_rank), (4, 0, 64));
        assert_eq!((k.per_layer.width, k.per_layer.vocab), (256, 262_144));
        assert!(k.correct_scale && c.tie_word_embeddings);
        assert_eq!(k.attention.final_softcap, Some(30.0));
        let [sliding, full] = &k.attention.ropes;
        assert_eq!(sliding.as_ref().unwrap().rope.theta, 1e4);
        assert_eq!(full.as_ref().unwrap().rope.theta, 1e6);
    }

    #[test]
    fn refuses_what_it_cannot_build() {
        for (extra, field) in [
            ("", "num_kv_shared_layers"),
            (
                r#", "num_kv_shared_layers": 0, "altup_active_idx": 4"#,
                "altup_active_idx",
            ),
            (
                r#", "num_kv_shared_layers": 0, "activation_sparsity_pattern": [0.5]"#,
                "activation_sparsity_pattern",
            ),
            (
                r#", "num_kv_shared_layers": 0, "activation_sparsity_pattern": [1, 0, 0, 0, 0,
                0, 0, 0, 0, 0, 0, 0]"#,
                "activation_sparsity_pattern.0",
            ),
            (
                r#", "num_kv_shared_layers": 0, "hidden_size_per_layer_input": null"#,
                "hidden_size_per_layer_input",
            ),
        ] {
            let err = parse(extra).unwrap_err().to_string();
            assert!(err.contains(field), "{extra}: {err}");
        }
        let err = crate::models::parse_fields(
            r#""model_type": "gemma3n_text", "hidden_size": 64, "intermediate_size": [128, 64],
            "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 300"#,
            r#", "num_kv_shared_layers": 0"#,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("intermediate_size"), "{err}");
    }
}
