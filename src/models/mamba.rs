//! Mamba and FalconMamba: decoders of Mamba-1 selective state-space layers only (no attention,
//! no MLP). Each block is an RMSNorm (`norm`), the Mamba mixer ([`super::components::mamba`]:
//! `in_proj`, a causal depthwise convolution with SiLU, `x_proj` to the low-rank time steps and
//! `B`, `C`, `dt_proj`, the selective scan as an ONNX `Scan` over time with a decay per channel
//! and state index, the `D` skip, the SiLU gate, `out_proj`) and the residual add; the model is
//! `backbone.embeddings`, `backbone.layers`, `backbone.norm_f` and a tied head by default.
//! FalconMamba adds weightless RMS norms on the time steps, `B` and `C` (`mixer_rms_eps`).
//! Every layer carries a conv state `past.{i}.conv` and an SSM state `past.{i}.ssm`
//! (docs/recurrent.md); onnxruntime-genai 0.18 has no model type for either, so their
//! packages have no genai_config.json.

use super::components::{MambaMixer, SsmMixer};
use super::decoder::{Family, LayerNorms, Names};
use super::family::FamilySpec;
use crate::config::{read_decoder, ArchConfig, DecoderFields, Fields, HfConfig, ModelType, Sign};
use crate::limits::config::{MAX_CONV_KERNEL, MAX_WIDTH};
use crate::Result;
use serde_json::Value;

/// The family's registry entry.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "mamba",
    summary: "Mamba-1 selective state-space layers only (FalconMamba: B/C/dt RMS norms), the \
              scan an ONNX `Scan` over time: conv and SSM states carried as `past.{i}.conv` / \
              `past.{i}.ssm`",
    model_types: &[
        ModelType {
            name: "mamba",
            genai_type: None,
            read,
            builds_longrope: false,
        },
        ModelType {
            name: "falcon_mamba",
            genai_type: None,
            read,
            builds_longrope: false,
        },
    ],
};

/// transformers' MambaConfig and FalconMambaConfig: `layer_norm_epsilon` 1e-5, tied head.
const FIELDS: DecoderFields = DecoderFields {
    tie_word_embeddings: true,
    rms_norm_eps: 1e-5,
    ..DecoderFields::LLAMA
};

/// Mamba's knobs: the mixer every layer is.
#[derive(Debug, Clone, PartialEq)]
pub struct Mamba {
    /// The mixer of every layer.
    pub mixer: MambaMixer,
}

/// The time-step rank (config field `field`: `time_step_rank`, Jamba's `mamba_dt_rank`):
/// `"auto"` (the default) is `⌈hidden / 16⌉`, else a positive integer.
pub(super) fn time_step_rank(
    field: &str,
    raw: Option<&Value>,
    hidden: usize,
    f: &Fields<'_>,
) -> Result<usize> {
    match raw {
        None | Some(Value::Null) => Ok(hidden.div_ceil(16)),
        Some(Value::String(s)) if s == "auto" => Ok(hidden.div_ceil(16)),
        Some(Value::Number(n)) if n.as_i64().is_some() => {
            f.count(field, n.as_i64().unwrap_or(0), MAX_WIDTH)
        }
        Some(v) => Err(f.err(
            field,
            &format!("{v} is not supported (expected \"auto\" or a positive integer)"),
        )),
    }
}

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    let hidden = f.positive("hidden_size", raw.hidden_size, MAX_WIDTH)?;
    let state = f.optional_count("state_size", raw.state_size, 16, MAX_WIDTH)?;
    let expand = f.optional_count("expand", raw.expand, 2, MAX_WIDTH)?;
    let kernel = f.optional_count("conv_kernel", raw.conv_kernel, 4, MAX_CONV_KERNEL)?;
    if kernel < 2 {
        return Err(f.err(
            "conv_kernel",
            "must be at least 2 (the conv state holds conv_kernel − 1 steps)",
        ));
    }
    let intermediate = expand as u64 * hidden as u64;
    if 2 * intermediate > MAX_WIDTH as u64 {
        return Err(f.err(
            "expand",
            &format!(
                "gives an in_proj of {} outputs (2·expand·hidden_size; at most {MAX_WIDTH})",
                2 * intermediate
            ),
        ));
    }
    let intermediate = intermediate as usize;
    let rank = time_step_rank("time_step_rank", raw.time_step_rank.as_ref(), hidden, f)?;
    if rank as u64 + 2 * state as u64 > MAX_WIDTH as u64 {
        return Err(f.err(
            "state_size",
            &format!(
                "gives an x_proj of {} outputs (time_step_rank + 2·state_size; at most \
                 {MAX_WIDTH})",
                rank as u64 + 2 * state as u64
            ),
        ));
    }
    let act = raw.hidden_act.as_deref().unwrap_or("silu");
    if act != "silu" && act != "swish" {
        return Err(f.err(
            "hidden_act",
            &format!(
                "`{act}` is not supported for {} (expected \"silu\")",
                t.name
            ),
        ));
    }
    let eps = f.number(
        "layer_norm_epsilon",
        raw.layer_norm_epsilon,
        1e-5,
        Sign::NonNegative,
    )?;
    let bcdt_norm_eps = match t.name {
        "falcon_mamba" => {
            Some(f.number("mixer_rms_eps", raw.mixer_rms_eps, 1e-6, Sign::NonNegative)?)
        }
        _ => None,
    };
    // The skeleton's attention fields, unused by a graph without attention, and one position
    // (Mamba has no position embeddings).
    let plain = HfConfig {
        num_attention_heads: Some(1),
        num_key_value_heads: Some(1),
        head_dim: Some(hidden as i64),
        intermediate_size: Some(intermediate as i64),
        max_position_embeddings: Some(1),
        rms_norm_eps: Some(eps as f64),
        rope_parameters: None,
        rope_scaling: None,
        layer_types: None,
        sliding_window: None,
        ..raw.clone()
    };
    read_decoder(&plain, t, f, &FIELDS, |dims| {
        Ok(Mamba {
            mixer: MambaMixer {
                hidden: dims.hidden_size,
                intermediate,
                state,
                rank,
                kernel,
                bias: raw.use_bias.unwrap_or(false),
                conv_bias: raw.use_conv_bias.unwrap_or(true),
                bcdt_norm_eps,
                bcdt_norm_weights: false,
            },
        })
    })
}

impl Family for Mamba {
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
        Some(SsmMixer::Mamba(self.mixer))
    }
}

#[cfg(test)]
mod tests {
    use super::Mamba;
    use crate::config::ArchConfig;

    fn parse(model_type: &str, extra: &str) -> crate::Result<ArchConfig> {
        crate::models::parse_fields(
            &format!(
                r#""model_type": "{model_type}", "hidden_size": 64, "state_size": 8,
                "expand": 2, "conv_kernel": 4, "num_hidden_layers": 2, "vocab_size": 300"#
            ),
            extra,
        )
    }

    #[test]
    fn reads_the_mixer_and_the_falcon_norms() {
        let c = parse("mamba", r#", "use_bias": true"#).unwrap();
        let m = c.knobs::<Mamba>().unwrap().mixer;
        assert_eq!((m.intermediate, m.state, m.rank, m.kernel), (128, 8, 4, 4));
        assert_eq!((m.bias, m.conv_bias, m.bcdt_norm_eps), (true, true, None));
        assert!(c.tie_word_embeddings);
        let c = parse(
            "falcon_mamba",
            r#", "time_step_rank": 16, "mixer_rms_eps": 1e-5"#,
        )
        .unwrap();
        let m = c.knobs::<Mamba>().unwrap().mixer;
        assert_eq!((m.rank, m.bcdt_norm_eps), (16, Some(1e-5)));
        let c = parse("falcon_mamba", r#", "time_step_rank": "auto""#).unwrap();
        let m = c.knobs::<Mamba>().unwrap().mixer;
        assert_eq!((m.rank, m.bcdt_norm_eps), (4, Some(1e-6)));
    }

    #[test]
    fn hostile_values_are_refused_by_name() {
        let cases = [
            (r#", "time_step_rank": "big""#, "time_step_rank"),
            (r#", "time_step_rank": 0"#, "time_step_rank"),
            (r#", "time_step_rank": 1.5"#, "time_step_rank"),
            (r#", "layer_norm_epsilon": NaN"#, "layer_norm_epsilon"),
            (r#", "mixer_rms_eps": -1.0"#, "mixer_rms_eps"),
            (r#", "expand": 1048576"#, "expand"),
            (r#", "conv_kernel": 1"#, "conv_kernel"),
            (r#", "conv_kernel": 65"#, "conv_kernel"),
            (r#", "state_size": 0"#, "state_size"),
            (r#", "state_size": 1048576"#, "state_size"),
            (r#", "hidden_act": "gelu""#, "hidden_act"),
        ];
        for (extra, field) in cases {
            let err = parse("falcon_mamba", extra).unwrap_err();
            assert!(err.to_string().contains(field), "{extra}: {err}");
        }
    }
}
