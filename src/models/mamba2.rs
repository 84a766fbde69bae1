//! Mamba2: a decoder of selective state-space layers only (no attention, no MLP). Each block is
//! an RMSNorm (`norm`), the Mamba2 mixer ([`super::components::ssm`]: `in_proj`, a causal
//! depthwise convolution with SiLU, the SSD scan over heads sharing `B`/`C` per group, the
//! gated group RMSNorm, `out_proj`) and the residual add; the model is `backbone.embeddings`,
//! `backbone.layers`, `backbone.norm_f` and an untied `lm_head` by default. Every layer
//! carries a conv state `past.{i}.conv` and an SSM state `past.{i}.ssm` (docs/recurrent.md);
//! onnxruntime-genai 0.18 has no model type for it, so its package has no genai_config.json.

use super::components::ssm_config::{time_step_limit, Mamba2Fields, Mamba2Sizes};
use super::components::{GateNorm, Mamba2Mixer, SsmMixer};
use super::decoder::{Family, LayerNorms, Names};
use super::family::FamilySpec;
use crate::config::{read_decoder, ArchConfig, DecoderFields, Fields, HfConfig, ModelType, Sign};
use crate::limits::config::{MAX_CONV_KERNEL, MAX_HEADS, MAX_WIDTH};
use crate::Result;

/// The family's registry entry.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "mamba2",
    summary: "selective state-space (SSD) layers only, no attention or MLP: conv and SSM \
              states carried as `past.{i}.conv` / `past.{i}.ssm`",
    model_types: &[ModelType {
        name: "mamba2",
        genai_type: None,
        read,
        builds_longrope: false,
    }],
};

/// transformers' Mamba2Config: `layer_norm_epsilon` 1e-5, untied head.
const FIELDS: DecoderFields = DecoderFields {
    tie_word_embeddings: false,
    rms_norm_eps: 1e-5,
    ..DecoderFields::LLAMA
};

/// Mamba2's knobs: the mixer every layer is.
#[derive(Debug, Clone, PartialEq)]
pub struct Mamba2 {
    /// The mixer of every layer.
    pub mixer: Mamba2Mixer,
}

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    let hidden = f.positive("hidden_size", raw.hidden_size, MAX_WIDTH)?;
    let heads = f.optional_count("num_heads", raw.num_heads, 128, MAX_HEADS)?;
    let head_dim = f.optional_count("head_dim", raw.head_dim, 64, MAX_WIDTH)?;
    let state = f.optional_count("state_size", raw.state_size, 128, MAX_WIDTH)?;
    let groups = f.optional_count("n_groups", raw.n_groups, 8, MAX_HEADS)?;
    let expand = f.optional_count("expand", raw.expand, 2, MAX_WIDTH)?;
    let kernel = f.optional_count("conv_kernel", raw.conv_kernel, 4, MAX_CONV_KERNEL)?;
    let intermediate = heads as u64 * head_dim as u64;
    if intermediate != expand as u64 * hidden as u64 {
        return Err(f.err(
            "expand",
            &format!(
                "expand × hidden_size ({expand} × {hidden}) must equal num_heads × head_dim \
                 ({heads} × {head_dim})"
            ),
        ));
    }
    let sizes = Mamba2Sizes {
        kernel,
        heads,
        groups,
        state,
        width: intermediate,
    };
    let names = Mamba2Fields {
        kernel: "conv_kernel",
        heads: "num_heads",
        groups: "n_groups",
        state: "state_size",
        width: "num_heads·head_dim",
    };
    sizes.check(f, &names)?;
    let act = raw.hidden_act.as_deref().unwrap_or("silu");
    if act != "silu" && act != "swish" {
        return Err(f.err(
            "hidden_act",
            &format!("`{act}` is not supported for mamba2 (expected \"silu\")"),
        ));
    }
    time_step_limit(raw.time_step_limit.as_ref(), f)?;
    let eps = f.number(
        "layer_norm_epsilon",
        raw.layer_norm_epsilon,
        1e-5,
        Sign::NonNegative,
    )?;
    // The skeleton's attention fields, unused by a graph without attention: the SSM heads,
    // and one position (Mamba2 has no position embeddings).
    let plain = HfConfig {
        num_attention_heads: Some(heads as i64),
        num_key_value_heads: Some(heads as i64),
        head_dim: Some(head_dim as i64),
        intermediate_size: Some(intermediate as i64),
        max_position_embeddings: Some(1),
        rms_norm_eps: Some(raw.layer_norm_epsilon.unwrap_or(1e-5)),
        rope_parameters: None,
        rope_scaling: None,
        layer_types: None,
        sliding_window: None,
        ..raw.clone()
    };
    read_decoder(&plain, t, f, &FIELDS, |dims| {
        Ok(Mamba2 {
            mixer: Mamba2Mixer {
                hidden: dims.hidden_size,
                heads,
                head_dim,
                state,
                groups,
                kernel,
                bias: raw.use_bias.unwrap_or(false),
                out_bias: raw.use_bias.unwrap_or(false),
                conv_bias: raw.use_conv_bias.unwrap_or(true),
                eps,
                gate_norm: GateNorm::GateThenNorm,
                scales: None,
                dt_min: None,
            },
        })
    })
}

impl Family for Mamba2 {
    fn names(&self) -> Names {
        Names {
            root: "backbone",
            embed: "embeddings",
            final_norm: "norm_f",
            ..Names::LLAMA
        }
    }

    fn layer_norms(&self) -> LayerNorms {
        LayerNorms {
            pre_attention: Some("norm"),
            pre_mlp: None,
            ..LayerNorms::PRE
        }
    }

    fn rotary_positions(&self, _cfg: &ArchConfig) -> bool {
        false
    }

    fn ssm_mixer(&self, _cfg: &ArchConfig, _i: usize) -> Option<SsmMixer> {
        Some(SsmMixer::Mamba2(self.mixer))
    }
}

#[cfg(test)]
mod tests {
    use super::Mamba2;
    use crate::config::ArchConfig;

    fn parse(extra: &str) -> crate::Result<ArchConfig> {
        crate::models::parse_fields(
            r#""model_type": "mamba2", "hidden_size": 64, "num_heads": 8, "head_dim": 16,
            "state_size": 16, "n_groups": 2, "expand": 2, "conv_kernel": 4,
            "num_hidden_layers": 2, "vocab_size": 300"#,
            extra,
        )
    }

    #[test]
    fn reads_the_mixer_and_pythons_infinity() {
        let c = parse(r#", "time_step_limit": [0.0, Infinity], "use_bias": true"#).unwrap();
        parse(r#", "time_step_limit": [0, {"__float__": "Infinity"}]"#).unwrap();
        let m = c.knobs::<Mamba2>().unwrap().mixer;
        assert_eq!((m.heads, m.head_dim, m.state, m.groups), (8, 16, 16, 2));
        assert_eq!(
            (m.conv_dim(), m.kernel, m.bias, m.conv_bias),
            (192, 4, true, true)
        );
        assert!(!c.tie_word_embeddings);
        parse("").unwrap();
    }

    #[test]
    fn hostile_values_are_refused_by_name() {
        let cases = [
            (r#", "time_step_limit": [0.0, 0.1]"#, "time_step_limit"),
            (
                r#", "time_step_limit": [0.001, Infinity]"#,
                "time_step_limit",
            ),
            (r#", "time_step_limit": "Infinity""#, "time_step_limit"),
            (
                r#", "time_step_limit": [0.0, {"__float__": "NaN"}]"#,
                "time_step_limit",
            ),
            (r#", "layer_norm_epsilon": NaN"#, "layer_norm_epsilon"),
            (r#", "n_groups": 3"#, "n_groups"),
            (r#", "expand": 3"#, "expand"),
            (r#", "conv_kernel": 1"#, "conv_kernel"),
            (r#", "conv_kernel": 65"#, "conv_kernel"),
            (r#", "num_heads": 0"#, "num_heads"),
            (r#", "state_size": 1048576"#, "state_size"),
            (r#", "hidden_act": "gelu""#, "hidden_act"),
        ];
        for (extra, field) in cases {
            let err = parse(extra).unwrap_err();
            assert!(err.to_string().contains(field), "{extra}: {err}");
        }
    }
}
