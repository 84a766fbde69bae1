//! Bamba (IBM): a hybrid decoder whose layers are either GQA attention (partial RoPE, half of
//! each head by default) or the Mamba2 mixer ([`super::components::ssm`], module
//! `layers.{i}.mamba`, carrying its conv and SSM states `past.{i}.conv` / `past.{i}.ssm`
//! instead of a KV cache); every layer then has a SwiGLU MLP (`feed_forward`) after
//! `pre_ff_layernorm`, and the final norm is `model.final_layernorm`. The attention layers are
//! `attn_layer_indices` (none by default: every layer Mamba2). onnxruntime-genai 0.18 has no
//! model type with an SSM state, so the package has no genai_config.json (docs/recurrent.md).

use super::components::ssm_config::{time_step_limit, Mamba2Fields, Mamba2Sizes};
use super::components::{GateNorm, Mamba2Mixer, SsmMixer};
use super::decoder::{Family, LayerNorms, Names};
use super::family::FamilySpec;
use crate::config::{
    read_decoder, read_rope, ArchConfig, DecoderFields, Fields, HfConfig, ModelType, Sign,
};
use crate::ir::{DType, GraphBuilder};
use crate::limits::config::{MAX_CONV_KERNEL, MAX_HEADS, MAX_LAYERS, MAX_WIDTH};
use crate::Result;
use serde_json::Value;

/// The family's registry entry.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "bamba",
    summary: "hybrid: Mamba2 layers (conv and SSM states carried as `past.{i}.conv` / \
              `past.{i}.ssm`) and GQA layers with partial RoPE; SwiGLU MLP in every layer",
    model_types: &[ModelType {
        name: "bamba",
        genai_type: None,
        read,
        builds_longrope: false,
    }],
};

/// transformers' BambaConfig: `rms_norm_eps` 1e-5, RoPE theta 1e4 on half of each head
/// (`partial_rotary_factor` 0.5 unless `rope_parameters` says otherwise), untied, biases per
/// `attention_bias` / `mlp_bias`.
const FIELDS: DecoderFields = DecoderFields {
    rope: |raw, head_dim, f| {
        let raw = HfConfig {
            partial_rotary_factor: Some(0.5),
            ..raw.clone()
        };
        read_rope(&raw, head_dim, 10_000.0, f)
    },
    rms_norm_eps: 1e-5,
    use_sliding_window: false,
    ..DecoderFields::LLAMA
};

/// Bamba's knobs: which layers are Mamba2, and their mixer.
#[derive(Debug, Clone, PartialEq)]
pub struct Bamba {
    /// Per layer, whether it is a Mamba2 layer (else attention).
    pub mamba_layers: Vec<bool>,
    /// The mixer of every Mamba2 layer.
    pub mixer: Mamba2Mixer,
}

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    let layers = f.positive("num_hidden_layers", raw.num_hidden_layers, MAX_LAYERS)?;
    let mut mamba_layers = vec![true; layers];
    for &i in raw.attn_layer_indices.iter().flatten() {
        let i = f.index("attn_layer_indices", i, layers - 1)?;
        mamba_layers[i] = false;
    }
    let eps = raw.rms_norm_eps.unwrap_or(1e-5);
    let mixer = read_mixer(raw, f, eps)?;
    let plain = HfConfig {
        layer_types: None,
        sliding_window: None,
        ..raw.clone()
    };
    read_decoder(&plain, t, f, &FIELDS, |_| {
        Ok(Bamba {
            mamba_layers,
            mixer,
        })
    })
}

/// The Mamba2 mixer of a hybrid config (Bamba's and Granite-4's `mamba_*` fields and
/// defaults: 128 heads, `mamba_d_head` `"auto"` = `mamba_expand · hidden_size /
/// mamba_n_heads`, 1 group, state 256, kernel 4, expand 2, conv bias on, projection biases
/// off), its gated norm's epsilon `eps` (`rms_norm_eps`). `time_step_limit` must be its
/// default, as for Mamba2.
pub(super) fn read_mixer(raw: &HfConfig, f: &Fields<'_>, eps: f64) -> Result<Mamba2Mixer> {
    let hidden = f.positive("hidden_size", raw.hidden_size, MAX_WIDTH)?;
    let heads = f.optional_count("mamba_n_heads", raw.mamba_n_heads, 128, MAX_HEADS)?;
    let groups = f.optional_count("mamba_n_groups", raw.mamba_n_groups, 1, MAX_HEADS)?;
    let state = f.optional_count("mamba_d_state", raw.mamba_d_state, 256, MAX_WIDTH)?;
    let kernel = f.optional_count("mamba_d_conv", raw.mamba_d_conv, 4, MAX_CONV_KERNEL)?;
    let expand = f.optional_count("mamba_expand", raw.mamba_expand, 2, MAX_WIDTH)?;
    let intermediate = expand as u64 * hidden as u64;
    if intermediate > MAX_WIDTH as u64 || intermediate % heads as u64 != 0 {
        return Err(f.err(
            "mamba_n_heads",
            &format!(
                "{heads} must divide mamba_expand × hidden_size ({expand} × {hidden}, at most \
                 {MAX_WIDTH})"
            ),
        ));
    }
    let head_dim = match &raw.mamba_d_head {
        None => (intermediate / heads as u64) as usize,
        Some(Value::String(s)) if s == "auto" => (intermediate / heads as u64) as usize,
        Some(v) => {
            let d = f.json_integer("mamba_d_head", Some(v))?;
            f.positive("mamba_d_head", d, MAX_WIDTH)?
        }
    };
    if heads as u64 * head_dim as u64 != intermediate {
        return Err(f.err(
            "mamba_d_head",
            &format!(
                "{head_dim} × mamba_n_heads ({heads}) must equal mamba_expand × hidden_size \
                 ({intermediate})"
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
        kernel: "mamba_d_conv",
        heads: "mamba_n_heads",
        groups: "mamba_n_groups",
        state: "mamba_d_state",
        width: "mamba_expand·hidden_size",
    };
    sizes.check(f, &names)?;
    time_step_limit(raw.time_step_limit.as_ref(), f)?;
    let eps = f.number("rms_norm_eps", Some(eps), eps, Sign::NonNegative)?;
    Ok(Mamba2Mixer {
        hidden,
        heads,
        head_dim,
        state,
        groups,
        kernel,
        bias: raw.mamba_proj_bias.unwrap_or(false),
        out_bias: raw.mamba_proj_bias.unwrap_or(false),
        conv_bias: raw.mamba_conv_bias.unwrap_or(true),
        eps,
        gate_norm: GateNorm::GateThenNorm,
        scales: None,
        dt_min: None,
    })
}

impl Family for Bamba {
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
        self.mamba_layers.contains(&false)
    }

    fn ssm_mixer(&self, _cfg: &ArchConfig, i: usize) -> Option<SsmMixer> {
        self.mamba_layers[i].then_some(SsmMixer::Mamba2(self.mixer))
    }

    fn ssm_module(&self) -> &'static str {
        "mamba"
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
        _i: usize,
        dtype: DType,
    ) -> String {
        self.mlp(b, cfg, x, &format!("{layer}.feed_forward"), dtype)
    }
}

#[cfg(test)]
mod tests {
    use super::Bamba;
    use crate::config::ArchConfig;

    fn parse(extra: &str) -> crate::Result<ArchConfig> {
        crate::models::parse_fields(
            r#""model_type": "bamba", "hidden_size": 64, "intermediate_size": 128,
            "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 3,
            "vocab_size": 300, "max_position_embeddings": 128, "mamba_n_heads": 8,
            "mamba_d_state": 16, "mamba_n_groups": 2"#,
            extra,
        )
    }

    #[test]
    fn reads_the_layer_kinds_the_mixer_and_half_rotary() {
        let c = parse(r#", "attn_layer_indices": [1], "mamba_d_head": "auto""#).unwrap();
        let k = c.knobs::<Bamba>().unwrap();
        assert_eq!(k.mamba_layers, [true, false, true]);
        let m = k.mixer;
        assert_eq!((m.heads, m.head_dim, m.state, m.groups), (8, 16, 16, 2));
        assert_eq!((m.kernel, m.bias, m.conv_bias), (4, false, true));
        assert_eq!(c.rope.rotary_dim, 8);
        let all = parse("").unwrap();
        assert_eq!(all.knobs::<Bamba>().unwrap().mamba_layers, [true; 3]);
        let c = parse(
            r#", "rope_parameters": {"rope_type": "default", "rope_theta": 1e4,
            "partial_rotary_factor": 1.0}"#,
        )
        .unwrap();
        assert_eq!(c.rope.rotary_dim, 16);
    }

    #[test]
    fn hostile_values_are_refused_by_name() {
        let cases = [
            (r#", "attn_layer_indices": [3]"#, "attn_layer_indices"),
            (r#", "attn_layer_indices": [-1]"#, "attn_layer_indices"),
            (r#", "mamba_d_head": 7"#, "mamba_d_head"),
            (r#", "mamba_d_head": "big""#, "mamba_d_head"),
            (r#", "mamba_n_heads": 7"#, "mamba_n_heads"),
            (r#", "mamba_n_heads": 0"#, "mamba_n_heads"),
            (r#", "mamba_n_groups": 3"#, "mamba_n_groups"),
            (r#", "mamba_d_conv": 1"#, "mamba_d_conv"),
            (r#", "mamba_d_state": 1048576"#, "mamba_d_state"),
            (r#", "mamba_expand": 1000000000"#, "mamba_expand"),
            (r#", "mamba_expand": 100000"#, "mamba_n_heads"),
            (r#", "time_step_limit": [0.0, 0.1]"#, "time_step_limit"),
            (r#", "rms_norm_eps": -1"#, "rms_norm_eps"),
        ];
        for (extra, field) in cases {
            let err = parse(extra).unwrap_err();
            assert!(err.to_string().contains(field), "{extra}: {err}");
        }
    }
}
