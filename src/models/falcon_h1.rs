//! Falcon-H1 (TII): a hybrid decoder whose every layer runs GQA attention (RoPE) and the Mamba2
//! mixer ([`super::components::ssm`], module `layers.{i}.mamba`) side by side on the same normed
//! input and adds their outputs before the residual add, so that each layer carries its KV
//! cache and the mixer's conv and SSM states ([`super::components::LayerCache::KvAndSsm`]);
//! then a SwiGLU MLP (`feed_forward`) after `pre_ff_layernorm`. µP multipliers throughout:
//! embeddings, keys, the attention's input and output, the mixer's input, its `in_proj` parts
//! (`ssm_multipliers`) and its output, the MLP's gate and down projection, the logits. The
//! mixer's width is `mamba_d_ssm`; its gated output is RMS-normed (before or after the gate) only
//! with `mamba_rms_norm`. onnxruntime-genai 0.18 has no such model type, so the package has no
//! genai_config.json (docs/recurrent.md).

use super::components::ssm_config::{time_step_limit, Mamba2Fields, Mamba2Sizes};
use super::components::{
    linear, scalar, AttentionSpec, DecoderInputs, GateNorm, Mamba2Mixer, Mamba2Scales, SsmMixer,
};
use super::decoder::{plain_qkv, Family, LayerNorms, Names};
use super::family::FamilySpec;
use crate::config::{read_decoder, ArchConfig, DecoderFields, Fields, HfConfig, ModelType, Sign};
use crate::ir::{DType, GraphBuilder};
use crate::limits::config::{MAX_CONV_KERNEL, MAX_HEADS, MAX_WIDTH};
use crate::Result;
use serde_json::Value;

/// The family's registry entry.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "falcon_h1",
    summary: "hybrid: GQA (RoPE) and a Mamba2 mixer side by side in every layer (KV cache, \
              conv and SSM states carried), µP multipliers, SwiGLU MLP",
    model_types: &[ModelType {
        name: "falcon_h1",
        genai_type: None,
        read,
        builds_longrope: false,
    }],
};

/// transformers' FalconH1Config: `rms_norm_eps` 1e-5, RoPE theta 1e4, untied, biases per
/// `attention_bias` / `mlp_bias`, no sliding window.
const FIELDS: DecoderFields = DecoderFields {
    rms_norm_eps: 1e-5,
    use_sliding_window: false,
    ..DecoderFields::LLAMA
};

/// Falcon-H1's knobs.
#[derive(Debug, Clone, PartialEq)]
pub struct FalconH1 {
    /// The mixer beside every layer's attention (its multipliers included).
    pub mixer: Mamba2Mixer,
    /// `embedding_multiplier`.
    pub embedding: f32,
    /// `lm_head_multiplier`.
    pub lm_head: f32,
    /// `key_multiplier`.
    pub key: f32,
    /// `attention_in_multiplier`.
    pub attention_in: f32,
    /// `attention_out_multiplier`.
    pub attention_out: f32,
    /// `mlp_multipliers`: the gate projection's and the down projection's.
    pub mlp: [f32; 2],
}

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    let mixer = read_mixer(raw, f)?;
    let one = |field: &str, v: Option<f64>| f.number(field, v, 1.0, Sign::NonZero);
    let mlp = multipliers::<2>("mlp_multipliers", raw.mlp_multipliers.as_deref(), f)?;
    let knobs = FalconH1 {
        mixer,
        embedding: one("embedding_multiplier", raw.embedding_multiplier)?,
        lm_head: one("lm_head_multiplier", raw.lm_head_multiplier)?,
        key: one("key_multiplier", raw.key_multiplier)?,
        attention_in: one("attention_in_multiplier", raw.attention_in_multiplier)?,
        attention_out: one("attention_out_multiplier", raw.attention_out_multiplier)?,
        mlp,
    };
    let plain = HfConfig {
        layer_types: None,
        sliding_window: None,
        ..raw.clone()
    };
    read_decoder(&plain, t, f, &FIELDS, |_| Ok(knobs))
}

/// `N` multipliers of list field `field` (all 1 when absent or null), each finite and nonzero.
fn multipliers<const N: usize>(
    field: &str,
    values: Option<&[f64]>,
    f: &Fields<'_>,
) -> Result<[f32; N]> {
    let Some(values) = values else {
        return Ok([1.0; N]);
    };
    if values.len() != N {
        return Err(f.err(
            field,
            &format!("has {} entries (expected {N})", values.len()),
        ));
    }
    let mut out = [1.0; N];
    for (o, &v) in out.iter_mut().zip(values) {
        *o = f.number(field, Some(v), 1.0, Sign::NonZero)?;
    }
    Ok(out)
}

/// The Mamba2 mixer of FalconH1Config's `mamba_*` fields and defaults: 128 heads, width
/// `mamba_d_ssm` (1024; null → `mamba_expand · hidden_size`, expand 2), `mamba_d_head`
/// `"auto"` = width / heads, 1 group, state 256, kernel 4, conv bias on, `in_proj` bias
/// `mamba_proj_bias` (off), `out_proj` bias `projectors_bias` (off), the gated output RMS-normed
/// only with `mamba_rms_norm` (off), before the gate with `mamba_norm_before_gate` (on), and
/// the multipliers `ssm_in_multiplier`, `ssm_multipliers` (5), `ssm_out_multiplier`.
/// `time_step_limit` must be its default.
fn read_mixer(raw: &HfConfig, f: &Fields<'_>) -> Result<Mamba2Mixer> {
    let hidden = f.positive("hidden_size", raw.hidden_size, MAX_WIDTH)?;
    let heads = f.optional_count("mamba_n_heads", raw.mamba_n_heads, 128, MAX_HEADS)?;
    let groups = f.optional_count("mamba_n_groups", raw.mamba_n_groups, 1, MAX_HEADS)?;
    let state = f.optional_count("mamba_d_state", raw.mamba_d_state, 256, MAX_WIDTH)?;
    let kernel = f.optional_count("mamba_d_conv", raw.mamba_d_conv, 4, MAX_CONV_KERNEL)?;
    let intermediate = match raw.mamba_d_ssm {
        None => 1024,
        Some(Some(d)) => f.count("mamba_d_ssm", d, MAX_WIDTH)?,
        Some(None) => {
            let expand = f.optional_count("mamba_expand", raw.mamba_expand, 2, MAX_WIDTH)?;
            let width = expand as u64 * hidden as u64;
            if width > MAX_WIDTH as u64 {
                return Err(f.err(
                    "mamba_expand",
                    &format!("{expand} × hidden_size ({hidden}) exceeds {MAX_WIDTH}"),
                ));
            }
            width as usize
        }
    };
    if intermediate % heads != 0 {
        return Err(f.err(
            "mamba_n_heads",
            &format!("{heads} must divide the mixer's width ({intermediate}, mamba_d_ssm)"),
        ));
    }
    let head_dim = match &raw.mamba_d_head {
        None => intermediate / heads,
        Some(Value::String(s)) if s == "auto" => intermediate / heads,
        Some(v) => {
            let d = f.json_integer("mamba_d_head", Some(v))?;
            f.positive("mamba_d_head", d, MAX_WIDTH)?
        }
    };
    if heads as u64 * head_dim as u64 != intermediate as u64 {
        return Err(f.err(
            "mamba_d_head",
            &format!(
                "{head_dim} × mamba_n_heads ({heads}) must equal the mixer's width \
                 ({intermediate}, mamba_d_ssm)"
            ),
        ));
    }
    let sizes = Mamba2Sizes {
        kernel,
        heads,
        groups,
        state,
        width: intermediate as u64,
    };
    let names = Mamba2Fields {
        kernel: "mamba_d_conv",
        heads: "mamba_n_heads",
        groups: "mamba_n_groups",
        state: "mamba_d_state",
        width: "mamba_d_ssm",
    };
    sizes.check(f, &names)?;
    time_step_limit(raw.time_step_limit.as_ref(), f)?;
    let eps = f.number("rms_norm_eps", raw.rms_norm_eps, 1e-5, Sign::NonNegative)?;
    let gate_norm = match (
        raw.mamba_rms_norm.unwrap_or(false),
        raw.mamba_norm_before_gate.unwrap_or(true),
    ) {
        (false, _) => GateNorm::GateOnly,
        (true, true) => GateNorm::NormThenGate,
        (true, false) => GateNorm::GateThenNorm,
    };
    let one = |field: &str, v: Option<f64>| f.number(field, v, 1.0, Sign::NonZero);
    let scales = Mamba2Scales {
        input: one("ssm_in_multiplier", raw.ssm_in_multiplier)?,
        projection: multipliers::<5>("ssm_multipliers", raw.ssm_multipliers.as_deref(), f)?,
        output: one("ssm_out_multiplier", raw.ssm_out_multiplier)?,
    };
    Ok(Mamba2Mixer {
        hidden,
        heads,
        head_dim,
        state,
        groups,
        kernel,
        bias: raw.mamba_proj_bias.unwrap_or(false),
        out_bias: raw.projectors_bias.unwrap_or(false),
        conv_bias: raw.mamba_conv_bias.unwrap_or(true),
        eps,
        gate_norm,
        scales: Some(scales),
        dt_min: None,
    })
}

/// `x · value`, or `x` where `value` is 1.
fn times(b: &mut GraphBuilder, x: String, value: f32, dtype: DType) -> String {
    if value == 1.0 {
        return x;
    }
    let c = scalar(b, value, dtype);
    b.op("Mul", &[&x, &c], vec![])
}

impl Family for FalconH1 {
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

    fn embed(
        &self,
        b: &mut GraphBuilder,
        _cfg: &ArchConfig,
        _io: &DecoderInputs,
        x: String,
        dtype: DType,
    ) -> String {
        times(b, x, self.embedding, dtype)
    }

    fn parallel_ssm(&self, _cfg: &ArchConfig, _i: usize) -> Option<SsmMixer> {
        Some(SsmMixer::Mamba2(self.mixer))
    }

    fn ssm_module(&self) -> &'static str {
        "mamba"
    }

    /// q, k and v of the input times `attention_in_multiplier`, k times `key_multiplier`.
    fn qkv(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        attn: &str,
        dtype: DType,
    ) -> [String; 3] {
        let x = times(b, x.to_string(), self.attention_in, dtype);
        let [q, k, v] = plain_qkv(b, cfg, &x, attn, dtype);
        [q, times(b, k, self.key, dtype), v]
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
        let o = self.o_proj(b, cfg, y, attn, dtype);
        times(b, o, self.attention_out, dtype)
    }

    /// `down(up(x) · silu(gate(x) · m₀)) · m₁`, `m` the `mlp_multipliers`.
    fn mlp(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        mlp: &str,
        dtype: DType,
    ) -> String {
        let (h, inner, bias) = (cfg.hidden_size, cfg.intermediate_size, cfg.mlp_bias);
        let gate = linear(b, x, &format!("{mlp}.gate_proj"), h, inner, bias, dtype);
        let gate = times(b, gate, self.mlp[0], dtype);
        let sig = b.op("Sigmoid", &[&gate], vec![]);
        let gate = b.op("Mul", &[&gate, &sig], vec![]);
        let up = linear(b, x, &format!("{mlp}.up_proj"), h, inner, bias, dtype);
        let prod = b.op("Mul", &[&gate, &up], vec![]);
        let down = linear(b, &prod, &format!("{mlp}.down_proj"), inner, h, bias, dtype);
        times(b, down, self.mlp[1], dtype)
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

    fn logits(&self, b: &mut GraphBuilder, _cfg: &ArchConfig, x: &str, head: &str, dtype: DType) {
        if self.lm_head == 1.0 {
            b.op_into("MatMul", &[x, head], vec![], "logits");
            return;
        }
        let product = b.op("MatMul", &[x, head], vec![]);
        let c = scalar(b, self.lm_head, dtype);
        b.op_into("Mul", &[&product, &c], vec![], "logits");
    }
}

#[cfg(test)]
mod tests {
    use super::FalconH1;
    use crate::config::ArchConfig;
    use crate::models::components::GateNorm;

    fn parse(extra: &str) -> crate::Result<ArchConfig> {
        crate::models::parse_fields(
            r#""model_type": "falcon_h1", "hidden_size": 64, "intermediate_size": 128,
            "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
            "vocab_size": 300, "max_position_embeddings": 128, "mamba_n_heads": 8,
            "mamba_d_state": 16, "mamba_n_groups": 2"#,
            extra,
        )
    }

    #[test]
    fn reads_the_mixer_width_norm_and_multipliers() {
        let c = parse(
            r#", "mamba_d_ssm": 96, "mamba_rms_norm": true, "ssm_multipliers":
            [1.0, 0.5, 2.0, 3.0, 0.25], "mlp_multipliers": [0.5, 2.0], "key_multiplier": 0.7"#,
        )
        .unwrap();
        let k = c.knobs::<FalconH1>().unwrap();
        let m = k.mixer;
        assert_eq!((m.heads, m.head_dim, m.groups, m.state), (8, 12, 2, 16));
        assert_eq!(m.gate_norm, GateNorm::NormThenGate);
        assert_eq!(m.scales.unwrap().projection, [1.0, 0.5, 2.0, 3.0, 0.25]);
        assert_eq!((k.mlp, k.key, k.embedding), ([0.5, 2.0], 0.7, 1.0));
        let d = parse("").unwrap();
        let m = d.knobs::<FalconH1>().unwrap().mixer;
        assert_eq!((m.head_dim, m.gate_norm), (128, GateNorm::GateOnly));
        let n = parse(
            r#", "mamba_d_ssm": null, "mamba_rms_norm": true,
            "mamba_norm_before_gate": false"#,
        )
        .unwrap();
        let m = n.knobs::<FalconH1>().unwrap().mixer;
        assert_eq!((m.head_dim, m.gate_norm), (16, GateNorm::GateThenNorm));
    }

    #[test]
    fn hostile_values_are_refused_by_name() {
        let cases = [
            (r#", "mamba_d_ssm": 100"#, "mamba_n_heads"),
            (r#", "mamba_d_ssm": -4"#, "mamba_d_ssm"),
            (
                r#", "mamba_d_ssm": null, "mamba_expand": 1000000000"#,
                "mamba_expand",
            ),
            (r#", "mamba_d_head": 7"#, "mamba_d_head"),
            (r#", "mamba_n_groups": 3"#, "mamba_n_groups"),
            (r#", "mamba_d_conv": 1"#, "mamba_d_conv"),
            (r#", "mamba_d_state": 1048576"#, "mamba_d_state"),
            (r#", "ssm_multipliers": [1.0, 2.0]"#, "ssm_multipliers"),
            (r#", "mlp_multipliers": [1.0, 0.0]"#, "mlp_multipliers"),
            (r#", "key_multiplier": 0"#, "key_multiplier"),
            (r#", "ssm_out_multiplier": 1e300"#, "ssm_out_multiplier"),
            (r#", "time_step_limit": [0.0, 0.1]"#, "time_step_limit"),
            (r#", "hidden_act": "gelu""#, "hidden_act"),
        ];
        for (extra, field) in cases {
            let err = parse(extra).unwrap_err();
            assert!(err.to_string().contains(field), "{extra}: {err}");
        }
    }
}
