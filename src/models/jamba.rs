//! Jamba (AI21): a hybrid decoder whose layers are either the Mamba-1 mixer
//! ([`super::components::mamba`], module `layers.{i}.mamba`, with RMS norms that have weights
//! on its time steps, `B` and `C`; carrying `past.{i}.conv` / `past.{i}.ssm` instead of a KV
//! cache) or GQA attention without positions and without biases (layer `i` with `i %
//! attn_layer_period == attn_layer_offset`); every layer then has its `feed_forward` block
//! after `pre_ff_layernorm`: softmax-routed SwiGLU experts (top-k, not renormalised) where `i %
//! expert_layer_period == expert_layer_offset`, a SwiGLU MLP elsewhere. onnxruntime-genai 0.18
//! has no model type with an SSM state, so the package has no genai_config.json
//! (docs/recurrent.md).

use super::components::{ExpertNames, ExpertWeights, MambaMixer, MoeSpec, Router, SsmMixer};
use super::decoder::{Family, LayerNorms, Names};
use super::family::FamilySpec;
use super::mamba::time_step_rank;
use crate::config::{
    read_decoder, read_routing, ArchConfig, Biases, DecoderFields, Fields, HfConfig, ModelType,
    Sign,
};
use crate::ir::{DType, GraphBuilder};
use crate::limits::config::{MAX_CONV_KERNEL, MAX_LAYERS, MAX_WIDTH};
use crate::Result;

/// The family's registry entry.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "jamba",
    summary: "hybrid: Mamba-1 layers with dt/B/C RMSNorms (conv and SSM states carried as \
              `past.{i}.conv` / `past.{i}.ssm`) and GQA layers without positions by period; \
              SwiGLU MLP or softmax-routed SwiGLU experts by period",
    model_types: &[ModelType {
        name: "jamba",
        genai_type: None,
        read,
        builds_longrope: false,
    }],
};

/// transformers' JambaConfig: no biases on attention or MLP, `rms_norm_eps` 1e-6, untied.
const FIELDS: DecoderFields = DecoderFields {
    biases: Biases::None,
    use_sliding_window: false,
    ..DecoderFields::LLAMA
};

/// Jamba's knobs.
#[derive(Debug, Clone, PartialEq)]
pub struct Jamba {
    /// Per layer, whether it is a Mamba layer (else attention).
    pub mamba_layers: Vec<bool>,
    /// Per layer, whether its feed-forward block is the experts (else the MLP).
    pub moe_layers: Vec<bool>,
    /// The mixer of every Mamba layer.
    pub mixer: MambaMixer,
    /// `(num_experts, num_experts_per_tok)`.
    pub routing: (usize, usize),
}

/// `(period, offset)` of config fields `fields` (`defaults` where absent): a positive period
/// and an offset below it, as transformers validates them.
fn period(
    raw: (Option<i64>, Option<i64>),
    fields: (&str, &str),
    defaults: (usize, usize),
    f: &Fields<'_>,
) -> Result<(usize, usize)> {
    let period = f.optional_count(fields.0, raw.0, defaults.0, MAX_LAYERS)?;
    if period == 0 {
        return Err(f.err(fields.0, "must be positive"));
    }
    let offset = match raw.1 {
        None => defaults.1,
        Some(v) => f.index(fields.1, v, period - 1)?,
    };
    Ok((period, offset))
}

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    let layers = f.optional_count("num_hidden_layers", raw.num_hidden_layers, 32, MAX_LAYERS)?;
    let (attn_period, attn_offset) = period(
        (raw.attn_layer_period, raw.attn_layer_offset),
        ("attn_layer_period", "attn_layer_offset"),
        (8, 4),
        f,
    )?;
    let (expert_period, expert_offset) = period(
        (raw.expert_layer_period, raw.expert_layer_offset),
        ("expert_layer_period", "expert_layer_offset"),
        (2, 1),
        f,
    )?;
    let routing = match raw.num_experts.or(raw.num_local_experts) {
        // One expert is transformers' MLP, whatever num_experts_per_tok says.
        Some(1) => (1, 1),
        _ => read_routing(raw, f, (16, 2))?,
    };
    let mamba_layers = (0..layers)
        .map(|i| i % attn_period != attn_offset)
        .collect();
    let moe_layers = (0..layers)
        .map(|i| routing.0 > 1 && i % expert_period == expert_offset)
        .collect();
    let act = raw.hidden_act.as_deref().unwrap_or("silu");
    if act != "silu" && act != "swish" {
        return Err(f.err(
            "hidden_act",
            &format!("`{act}` is not supported for jamba (expected \"silu\")"),
        ));
    }
    let hidden = f.positive("hidden_size", raw.hidden_size, MAX_WIDTH)?;
    let state = f.optional_count("mamba_d_state", raw.mamba_d_state, 16, MAX_WIDTH)?;
    let expand = f.optional_count("mamba_expand", raw.mamba_expand, 2, MAX_WIDTH)?;
    let kernel = f.optional_count("mamba_d_conv", raw.mamba_d_conv, 4, MAX_CONV_KERNEL)?;
    if kernel < 2 {
        return Err(f.err(
            "mamba_d_conv",
            "must be at least 2 (the conv state holds mamba_d_conv − 1 steps)",
        ));
    }
    let intermediate = expand as u64 * hidden as u64;
    if 2 * intermediate > MAX_WIDTH as u64 {
        return Err(f.err(
            "mamba_expand",
            &format!(
                "gives an in_proj of {} outputs (2·mamba_expand·hidden_size; at most \
                 {MAX_WIDTH})",
                2 * intermediate
            ),
        ));
    }
    let rank = time_step_rank("mamba_dt_rank", raw.mamba_dt_rank.as_ref(), hidden, f)?;
    if rank as u64 + 2 * state as u64 > MAX_WIDTH as u64 {
        return Err(f.err(
            "mamba_d_state",
            &format!(
                "gives an x_proj of {} outputs (mamba_dt_rank + 2·mamba_d_state; at most \
                 {MAX_WIDTH})",
                rank as u64 + 2 * state as u64
            ),
        ));
    }
    let eps = f.number("rms_norm_eps", raw.rms_norm_eps, 1e-6, Sign::NonNegative)?;
    let mixer = MambaMixer {
        hidden,
        intermediate: intermediate as usize,
        state,
        rank,
        kernel,
        bias: raw.mamba_proj_bias.unwrap_or(false),
        conv_bias: raw.mamba_conv_bias.unwrap_or(true),
        bcdt_norm_eps: Some(eps),
        bcdt_norm_weights: true,
    };
    let plain = HfConfig {
        num_hidden_layers: Some(layers as i64),
        num_attention_heads: raw.num_attention_heads.or(Some(32)),
        num_key_value_heads: raw.num_key_value_heads.or(Some(8)),
        intermediate_size: raw.intermediate_size.or(Some(14336)),
        max_position_embeddings: raw.max_position_embeddings.or(Some(262144)),
        layer_types: None,
        sliding_window: None,
        ..raw.clone()
    };
    read_decoder(&plain, t, f, &FIELDS, |_| {
        Ok(Jamba {
            mamba_layers,
            moe_layers,
            mixer,
            routing,
        })
    })
}

impl Family for Jamba {
    fn names(&self) -> Names {
        Names {
            final_norm: "final_layernorm",
            ..Names::LLAMA
        }
    }

    fn layer_norms(&self) -> LayerNorms {
        LayerNorms {
            pre_mlp: Some("pre_ff_layernorm"),
            ..LayerNorms::PRE
        }
    }

    fn rotary_positions(&self, _cfg: &ArchConfig) -> bool {
        false
    }

    fn ssm_mixer(&self, _cfg: &ArchConfig, i: usize) -> Option<SsmMixer> {
        self.mamba_layers[i].then_some(SsmMixer::Mamba(self.mixer))
    }

    fn ssm_module(&self) -> &'static str {
        "mamba"
    }

    fn ssm_with_mlp(&self) -> bool {
        true
    }

    /// The experts of `{layer}.feed_forward` on the MoE layers, its SwiGLU MLP elsewhere.
    fn layer_mlp(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        layer: &str,
        i: usize,
        dtype: DType,
    ) -> String {
        let module = format!("{layer}.feed_forward");
        if !self.moe_layers[i] {
            return self.mlp(b, cfg, x, &module, dtype);
        }
        let weights = ExpertWeights::PerExpert(ExpertNames {
            router: "router",
            ..ExpertNames::PROJ
        });
        let router = Router::Softmax { normalize: false };
        let spec = MoeSpec::new(cfg, cfg.intermediate_size, self.routing, router, weights);
        spec.build(b, x, &module, dtype)
    }
}

#[cfg(test)]
mod tests {
    use super::Jamba;
    use crate::config::ArchConfig;

    fn parse(extra: &str) -> crate::Result<ArchConfig> {
        crate::models::parse_fields(
            r#""model_type": "jamba", "hidden_size": 64, "intermediate_size": 32,
            "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 4,
            "vocab_size": 300, "attn_layer_period": 3,
            "attn_layer_offset": 1"#,
            extra,
        )
    }

    #[test]
    fn reads_the_layer_kinds_and_the_mixer() {
        let c = parse(r#", "num_experts": 4"#).unwrap();
        let k = c.knobs::<Jamba>().unwrap();
        assert_eq!(k.mamba_layers, [true, false, true, true]);
        assert_eq!(k.moe_layers, [false, true, false, true]);
        assert_eq!(k.routing, (4, 2));
        let m = k.mixer;
        assert_eq!((m.intermediate, m.state, m.rank, m.kernel), (128, 16, 4, 4));
        assert_eq!(
            (m.bias, m.conv_bias, m.bcdt_norm_eps),
            (false, true, Some(1e-6))
        );
        assert!(m.bcdt_norm_weights && !c.qkv_bias && !c.mlp_bias);
        let c = parse(r#", "num_experts": 1, "mamba_dt_rank": 8"#).unwrap();
        let k = c.knobs::<Jamba>().unwrap();
        assert_eq!(
            (k.moe_layers.as_slice(), k.mixer.rank),
            ([false; 4].as_slice(), 8)
        );
    }

    #[test]
    fn hostile_values_are_refused_by_name() {
        let cases = [
            (r#", "attn_layer_period": 0"#, "attn_layer_period"),
            (r#", "attn_layer_offset": 3"#, "attn_layer_offset"),
            (r#", "expert_layer_offset": -1"#, "expert_layer_offset"),
            (r#", "mamba_dt_rank": "big""#, "mamba_dt_rank"),
            (r#", "mamba_d_conv": 1"#, "mamba_d_conv"),
            (r#", "mamba_expand": 1000000000"#, "mamba_expand"),
            (r#", "mamba_d_state": 1048576"#, "mamba_d_state"),
            (
                r#", "num_experts": 4, "num_experts_per_tok": 5"#,
                "num_experts_per_tok",
            ),
            (r#", "hidden_act": "gelu""#, "hidden_act"),
            (r#", "rms_norm_eps": -1"#, "rms_norm_eps"),
        ];
        for (extra, field) in cases {
            let err = parse(extra).unwrap_err();
            assert!(err.to_string().contains(field), "{extra}: {err}");
        }
    }
}
