//! dots.llm1 (`dots1`): the Qwen3 decoder (per-head q/k RMSNorm, `attention_bias` on q/k/v/o,
//! sliding-window layers from `max_window_layers` on or as `layer_types` says) with
//! DeepSeek-V3's mixture of experts ([`DeepseekMoe`]: sigmoid router with
//! `e_score_correction_bias`, group-limited top-k, `routed_scaling_factor`, shared experts)
//! from layer `first_k_dense_replace` on.

use super::decoder::{Family, QkNorm};
use super::deepseek::{sigmoid_router, DeepseekExperts, DeepseekMoe};
use super::family::FamilySpec;
use crate::config::{
    read_decoder, ArchConfig, Biases, DecoderFields, Fields, HfConfig, ModelType, SlidingLayers,
};
use crate::ir::{DType, GraphBuilder};
use crate::limits::config::MAX_LAYERS;
use crate::Result;

/// The family's registry entry.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "dots1",
    summary: "Qwen3's attention (per-head q/k RMSNorm, sliding layers from `max_window_layers`) \
              with DeepSeek-V3's mixture of experts (sigmoid router with \
              `e_score_correction_bias`, group-limited top-k, shared experts)",
    model_types: &[ModelType::generative("dots1", "decoder", read)],
};

/// transformers' Dots1Config: `attention_bias` on q/k/v/o, no MLP bias, RoPE theta 1e4,
/// untied, a window of 4096 on the layers from `max_window_layers` (62) on.
const FIELDS: DecoderFields = DecoderFields {
    biases: Biases::Configured { mlp_bias: false },
    sliding_window: Some(4096),
    sliding_layers: SlidingLayers::Pattern(from_max_window_layers),
    ..DecoderFields::LLAMA
};

/// Dots1's window layers without `layer_types`: those from `max_window_layers` (62) on.
fn from_max_window_layers(raw: &HfConfig, layers: usize, f: &Fields<'_>) -> Result<Vec<bool>> {
    let first = match raw.max_window_layers {
        Some(m) => f.index("max_window_layers", m, MAX_LAYERS)?,
        None => 62,
    };
    Ok((0..layers).map(|i| i >= first).collect())
}

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    read_decoder(raw, t, f, &FIELDS, |_| {
        // Dots1Config has no usable defaults for these (None).
        if raw.n_routed_experts.is_none() {
            return Err(f.err("n_routed_experts", "missing (expected a positive integer)"));
        }
        if raw.n_shared_experts.is_none() {
            return Err(f.err("n_shared_experts", "missing (expected an integer ≥ 0)"));
        }
        let experts = DeepseekExperts::read(raw, f, (0, None), 1408, 0, 0)?;
        let router = sigmoid_router(raw, f, experts.experts, (1, 1), (false, 1.0))?;
        Ok(Dots1 {
            moe: DeepseekMoe { experts, router },
        })
    })
}

/// dots.llm1's knobs and hooks.
#[derive(Debug, Clone, PartialEq)]
pub struct Dots1 {
    /// The mixture of experts.
    pub moe: DeepseekMoe,
}

impl Family for Dots1 {
    fn qk_norm_kind(&self, _cfg: &ArchConfig) -> QkNorm {
        QkNorm::PerHead
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
    use super::Dots1;

    const BASE: &str = r#""model_type": "dots1", "hidden_size": 64, "intermediate_size": 128,
        "num_attention_heads": 4, "num_hidden_layers": 3, "vocab_size": 300,
        "max_position_embeddings": 8192"#;

    #[test]
    fn reads_windows_from_max_window_layers_and_requires_the_expert_counts() {
        let experts = r#", "n_routed_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 1"#;
        let c = crate::models::parse_fields(BASE, experts).unwrap();
        assert_eq!(
            c.layer_windows, [None; 3],
            "max_window_layers 62: no layer slides"
        );
        let k = c.knobs::<Dots1>().unwrap();
        assert_eq!(k.moe.experts.moe_layers, [true; 3]);
        assert!(k.moe.router.sigmoid && !k.moe.router.normalize);
        let windows = format!(r#"{experts}, "max_window_layers": 1, "sliding_window": 16"#);
        let c = crate::models::parse_fields(BASE, &windows).unwrap();
        assert_eq!(c.layer_windows, [None, Some(16), Some(16)]);
        for (missing, fields) in [
            (
                "n_routed_experts",
                r#", "num_experts_per_tok": 2, "n_shared_experts": 1"#,
            ),
            (
                "num_experts_per_tok",
                r#", "n_routed_experts": 8, "n_shared_experts": 1"#,
            ),
            (
                "n_shared_experts",
                r#", "n_routed_experts": 8, "num_experts_per_tok": 2"#,
            ),
        ] {
            let err = crate::models::parse_fields(BASE, fields)
                .unwrap_err()
                .to_string();
            assert!(err.contains(missing), "{missing}: {err}");
        }
    }
}
