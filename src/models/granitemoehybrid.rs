//! Granite-4 (IBM, transformers' GraniteMoeHybridForCausalLM): a hybrid decoder whose layers
//! are either GQA attention (RoPE only where `position_embedding_type` is `"rope"`; the hybrid
//! checkpoints say `"nope"`) or the Mamba2 mixer ([`super::components::ssm`], module
//! `layers.{i}.mamba`, carrying its conv and SSM states instead of a KV cache, as Bamba's);
//! every layer's MLP is the shared SwiGLU expert (`shared_mlp`, `shared_intermediate_size`)
//! plus, where `num_local_experts` is not 0, Granite-MoE's routed experts
//! ([`super::granitemoe`]); Granite's multipliers throughout. onnxruntime-genai 0.18's
//! `granitemoehybrid` type runs the attention-only configurations (its builder knows no Mamba2
//! layer); a package with Mamba2 layers carries SSM states no genai model type has, so it gets
//! no genai_config.json (docs/recurrent.md).

use super::bamba::read_mixer;
use super::components::{DecoderInputs, Mamba2Mixer, SsmMixer};
use super::decoder::Family;
use super::family::FamilySpec;
use super::granite::{multipliers, Multipliers};
use super::granitemoe::GraniteMoe;
use super::granitemoeshared::shared_expert;
use crate::config::{
    read_decoder, read_routing, ArchConfig, Biases, DecoderFields, Fields, HfConfig, ModelType,
};
use crate::ir::{DType, GraphBuilder};
use crate::limits::config::{MAX_LAYERS, MAX_WIDTH};
use crate::Result;

/// The family's registry entry.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "granitemoehybrid",
    summary: "hybrid: Mamba2 layers (conv and SSM states carried; genai_config.json only \
              without them) and GQA layers (RoPE or none), Granite's multipliers, a shared \
              SwiGLU expert beside optional routed ones",
    model_types: &[ModelType::generative(
        "granitemoehybrid",
        "granitemoehybrid",
        read,
    )],
};

/// transformers' GraniteMoeHybridConfig: `attention_bias` on q, k, v and o, no MLP bias,
/// RoPE theta 1e4, `rms_norm_eps` 1e-6, untied.
const FIELDS: DecoderFields = DecoderFields {
    biases: Biases::Configured { mlp_bias: false },
    use_sliding_window: false,
    ..DecoderFields::LLAMA
};

/// Granite-4's knobs.
#[derive(Debug, Clone, PartialEq)]
pub struct GraniteMoeHybrid {
    /// Granite's multipliers.
    pub multipliers: Multipliers,
    /// Per layer, whether it is a Mamba2 layer (else attention).
    pub mamba_layers: Vec<bool>,
    /// The mixer of every Mamba2 layer.
    pub mixer: Mamba2Mixer,
    /// `(num_local_experts, num_experts_per_tok)`; no routed experts when the first is 0.
    pub routing: (usize, usize),
    /// `shared_intermediate_size`, the shared expert's width.
    pub shared: usize,
    /// Whether the attention layers rotate q and k (`position_embedding_type` `"rope"`).
    pub rope: bool,
}

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    let layers = f.positive("num_hidden_layers", raw.num_hidden_layers, MAX_LAYERS)?;
    let mamba_layers = match &raw.layer_types {
        // transformers' default: every layer Mamba2.
        None => vec![true; layers],
        Some(types) if types.len() != layers => {
            return Err(f.err(
                "layer_types",
                &format!(
                    "{} entries for {layers} layers (num_hidden_layers)",
                    types.len()
                ),
            ))
        }
        Some(types) => types
            .iter()
            .map(|t| match t.as_str() {
                "mamba" | "linear_attention" => Ok(true),
                "attention" | "full_attention" => Ok(false),
                other => Err(f.err(
                    "layer_types",
                    &format!(
                        "`{other}` is not a Granite-4 layer type (mamba / linear_attention, \
                         attention / full_attention)"
                    ),
                )),
            })
            .collect::<Result<_>>()?,
    };
    let rope = match raw.position_embedding_type.as_deref() {
        Some("rope") => true,
        None | Some("nope") => false,
        Some(other) => {
            return Err(f.err(
                "position_embedding_type",
                &format!("`{other}` is not supported (expected \"rope\", \"nope\" or null)"),
            ))
        }
    };
    let mixer = read_mixer(raw, f, raw.rms_norm_eps.unwrap_or(1e-6))?;
    let routing = match raw.num_local_experts {
        Some(0) => (0, 0),
        _ => read_routing(raw, f, (8, 2))?,
    };
    let shared = f.optional_count(
        "shared_intermediate_size",
        raw.shared_intermediate_size,
        1024,
        MAX_WIDTH,
    )?;
    let plain = HfConfig {
        layer_types: None,
        sliding_window: None,
        ..raw.clone()
    };
    read_decoder(&plain, t, f, &FIELDS, |_| {
        Ok(GraniteMoeHybrid {
            multipliers: multipliers(raw, f)?,
            mamba_layers,
            mixer,
            routing,
            shared,
            rope,
        })
    })
}

impl Family for GraniteMoeHybrid {
    fn embed(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        io: &DecoderInputs,
        x: String,
        dtype: DType,
    ) -> String {
        self.multipliers.embed(b, cfg, io, x, dtype)
    }

    fn attention_scale(&self, cfg: &ArchConfig) -> f32 {
        self.multipliers.attention_scale(cfg)
    }

    fn residual_branch(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        y: String,
        dtype: DType,
    ) -> String {
        self.multipliers.residual_branch(b, cfg, y, dtype)
    }

    fn logits(&self, b: &mut GraphBuilder, cfg: &ArchConfig, x: &str, head: &str, dtype: DType) {
        self.multipliers.logits(b, cfg, x, head, dtype)
    }

    fn rotary_positions(&self, _cfg: &ArchConfig) -> bool {
        self.rope && self.mamba_layers.contains(&false)
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

    /// The shared expert, plus the routed experts where there are any.
    fn layer_mlp(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        layer: &str,
        i: usize,
        dtype: DType,
    ) -> String {
        let (experts, top_k) = self.routing;
        if experts == 0 {
            return shared_expert(b, cfg, x, layer, self.shared, dtype);
        }
        let moe = GraniteMoe {
            multipliers: self.multipliers,
            experts,
            top_k,
        };
        let routed = moe.layer_mlp(b, cfg, x, layer, i, dtype);
        let shared = shared_expert(b, cfg, x, layer, self.shared, dtype);
        b.op("Add", &[&routed, &shared], vec![])
    }
}

#[cfg(test)]
mod tests {
    use super::GraniteMoeHybrid;
    use crate::config::ArchConfig;

    fn parse(extra: &str) -> crate::Result<ArchConfig> {
        crate::models::parse_fields(
            r#""model_type": "granitemoehybrid", "hidden_size": 64, "intermediate_size": 16,
            "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 3,
            "vocab_size": 300, "max_position_embeddings": 128, "mamba_n_heads": 8,
            "mamba_d_state": 16, "mamba_n_groups": 2"#,
            extra,
        )
    }

    #[test]
    fn reads_layer_kinds_positions_and_experts() {
        let c = parse(
            r#", "layer_types": ["mamba", "attention", "linear_attention"],
            "position_embedding_type": "nope", "num_local_experts": 4,
            "shared_intermediate_size": 32"#,
        )
        .unwrap();
        let k = c.knobs::<GraniteMoeHybrid>().unwrap();
        assert_eq!(k.mamba_layers, [true, false, true]);
        assert_eq!((k.routing, k.shared, k.rope), ((4, 2), 32, false));
        assert_eq!((k.mixer.heads, k.mixer.head_dim), (8, 16));
        let c = parse(
            r#", "layer_types": ["full_attention", "attention", "attention"],
            "position_embedding_type": "rope", "num_local_experts": 0"#,
        )
        .unwrap();
        let k = c.knobs::<GraniteMoeHybrid>().unwrap();
        assert_eq!(k.mamba_layers, [false; 3]);
        assert_eq!((k.routing, k.shared, k.rope), ((0, 0), 1024, true));
        let all = parse("").unwrap();
        assert_eq!(
            all.knobs::<GraniteMoeHybrid>().unwrap().mamba_layers,
            [true; 3]
        );
    }

    #[test]
    fn hostile_values_are_refused_by_name() {
        let cases = [
            (r#", "layer_types": ["mamba"]"#, "layer_types"),
            (
                r#", "layer_types": ["mamba", "conv", "mamba"]"#,
                "layer_types",
            ),
            (
                r#", "position_embedding_type": "alibi""#,
                "position_embedding_type",
            ),
            (r#", "num_local_experts": -1"#, "num_local_experts"),
            (
                r#", "num_local_experts": 2, "num_experts_per_tok": 3"#,
                "num_experts_per_tok",
            ),
            (
                r#", "shared_intermediate_size": 0"#,
                "shared_intermediate_size",
            ),
            (r#", "residual_multiplier": 0"#, "residual_multiplier"),
            (r#", "mamba_n_groups": 3"#, "mamba_n_groups"),
            (r#", "time_step_limit": [0.0, 1.0]"#, "time_step_limit"),
        ];
        for (extra, field) in cases {
            let err = parse(extra).unwrap_err();
            assert!(err.to_string().contains(field), "{extra}: {err}");
        }
    }
}
