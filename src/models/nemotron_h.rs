//! Nemotron-H (NVIDIA, transformers' NemotronHForCausalLM): a hybrid decoder whose every block
//! is one mixer between its own RMSNorm (`norm`) and the residual add, the mixer per layer
//! (`layers_block_type`, or the older `hybrid_override_pattern`): the Mamba2 mixer
//! ([`super::components::ssm`], carrying `past.{i}.conv` / `past.{i}.ssm`), GQA attention
//! without positions and without biases (carrying its KV cache), a squared-ReLU MLP, or
//! DeepSeek-V3-routed squared-ReLU experts plus a shared expert — the last two mix no tokens
//! and carry no state. Modules: `backbone.embeddings`, `backbone.layers.{i}.mixer`,
//! `backbone.norm_f`, an untied `lm_head` by default. onnxruntime-genai 0.18 has no model
//! type for it, so the package has no genai_config.json (docs/recurrent.md).

use super::components::ssm_config::{time_step_limit, Mamba2Fields, Mamba2Sizes};
use super::components::{
    linear, squared_relu_mlp, ExpertWeights, GateNorm, Mamba2Mixer, MoeSpec, Router, SsmMixer,
};
use super::decoder::{Family, LayerNorms, Names};
use super::deepseek::sigmoid_router;
use super::family::FamilySpec;
use crate::config::{read_decoder, ArchConfig, DecoderFields, Fields, HfConfig, ModelType, Sign};
use crate::ir::{DType, GraphBuilder};
use crate::limits::config::{MAX_CONV_KERNEL, MAX_EXPERTS, MAX_HEADS, MAX_LAYERS, MAX_WIDTH};
use crate::Result;

/// The family's registry entry.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "nemotron_h",
    summary: "hybrid, one mixer per block: Mamba2 (conv and SSM states carried as \
              `past.{i}.conv` / `past.{i}.ssm`), GQA without positions, squared-ReLU MLP or \
              sigmoid-routed squared-ReLU experts (no state)",
    model_types: &[ModelType {
        name: "nemotron_h",
        genai_type: None,
        read,
        builds_longrope: false,
    }],
};

/// transformers' NemotronHConfig: 32 heads of 128 channels, 8 key/value heads, no attention
/// biases whatever `attention_bias` says, `mlp_bias` on the MLP and shared expert,
/// `layer_norm_epsilon` 1e-5, untied.
const FIELDS: DecoderFields = DecoderFields {
    head_dim: Some(128),
    silu_mlp: false,
    rms_norm_eps: 1e-5,
    use_sliding_window: false,
    ..DecoderFields::LLAMA
};

/// What a Nemotron-H block's mixer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Block {
    /// The Mamba2 mixer (`linear_attention`, `M`).
    Mamba,
    /// Attention (`full_attention`, `*`).
    Attention,
    /// The squared-ReLU MLP (`mlp`, `-`).
    Mlp,
    /// The routed experts and the shared expert (`moe`, `E`).
    Moe,
}

/// The MoE blocks' shape.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NemotronHMoe {
    /// `(n_routed_experts, num_experts_per_tok)`.
    pub routing: (usize, usize),
    /// `moe_intermediate_size`, each routed expert's width.
    pub intermediate: usize,
    /// `moe_shared_expert_intermediate_size`, the shared expert's width.
    pub shared: usize,
    /// The sigmoid router with its correction bias.
    pub router: Router,
}

/// Nemotron-H's knobs.
#[derive(Debug, Clone, PartialEq)]
pub struct NemotronH {
    /// Per layer, its block.
    pub blocks: Vec<Block>,
    /// The mixer of every Mamba2 block.
    pub mixer: Mamba2Mixer,
    /// The MoE blocks' shape, where there are any.
    pub moe: Option<NemotronHMoe>,
}

/// The blocks as config.json lists them: `layers_block_type` (or its alias `layer_types`),
/// else `hybrid_override_pattern`, else transformers' default (Mamba2, MoE, attention, MLP).
fn read_blocks(raw: &HfConfig, f: &Fields<'_>) -> Result<Vec<Block>> {
    let (field, names): (&str, Vec<String>) = match (
        &raw.layers_block_type,
        &raw.layer_types,
        &raw.hybrid_override_pattern,
    ) {
        (Some(list), _, _) => ("layers_block_type", list.clone()),
        (None, Some(list), _) => ("layer_types", list.clone()),
        (None, None, Some(pattern)) => (
            "hybrid_override_pattern",
            pattern.chars().map(String::from).collect(),
        ),
        (None, None, None) => (
            "layers_block_type",
            vec!["M".into(), "E".into(), "*".into(), "-".into()],
        ),
    };
    if names.is_empty() || names.len() > MAX_LAYERS {
        return Err(f.err(
            field,
            &format!("{} layers (expected 1 to {MAX_LAYERS})", names.len()),
        ));
    }
    names
        .iter()
        .map(|n| match n.as_str() {
            "linear_attention" | "mamba" | "M" => Ok(Block::Mamba),
            "full_attention" | "attention" | "*" => Ok(Block::Attention),
            "mlp" | "-" => Ok(Block::Mlp),
            "moe" | "E" => Ok(Block::Moe),
            other => Err(f.err(
                field,
                &format!(
                    "`{other}` is not a Nemotron-H block (linear_attention / M, full_attention \
                     / *, mlp / -, moe / E)"
                ),
            )),
        })
        .collect()
}

/// The Mamba2 mixer of a Nemotron-H config (`mamba_num_heads` 128 of `mamba_head_dim` 64,
/// `n_groups` 8, `ssm_state_size` 128, `conv_kernel` 4 — the `mamba_*` spellings override, as
/// transformers reads them —, `use_bias` on `in_proj` / `out_proj`, `use_conv_bias`).
fn read_mixer(raw: &HfConfig, f: &Fields<'_>, hidden: usize, eps: f32) -> Result<Mamba2Mixer> {
    let heads = f.optional_count("mamba_num_heads", raw.mamba_num_heads, 128, MAX_HEADS)?;
    let head_dim = f.optional_count("mamba_head_dim", raw.mamba_head_dim, 64, MAX_WIDTH)?;
    let state = f.optional_count("ssm_state_size", raw.ssm_state_size, 128, MAX_WIDTH)?;
    let (groups_field, groups) = match raw.mamba_n_groups {
        Some(g) => ("mamba_n_groups", Some(g)),
        None => ("n_groups", raw.n_groups),
    };
    let groups = f.optional_count(groups_field, groups, 8, MAX_HEADS)?;
    let (kernel_field, kernel) = match raw.mamba_d_conv {
        Some(k) => ("mamba_d_conv", Some(k)),
        None => ("conv_kernel", raw.conv_kernel),
    };
    let kernel = f.optional_count(kernel_field, kernel, 4, MAX_CONV_KERNEL)?;
    let intermediate = heads as u64 * head_dim as u64;
    let sizes = Mamba2Sizes {
        kernel,
        heads,
        groups,
        state,
        width: intermediate,
    };
    let names = Mamba2Fields {
        kernel: kernel_field,
        heads: "mamba_num_heads",
        groups: groups_field,
        state: "ssm_state_size",
        width: "mamba_num_heads·mamba_head_dim",
    };
    sizes.check(f, &names)?;
    let act = raw.mamba_hidden_act.as_deref().unwrap_or("silu");
    if act != "silu" && act != "swish" {
        return Err(f.err(
            "mamba_hidden_act",
            &format!("`{act}` is not supported (expected \"silu\")"),
        ));
    }
    time_step_limit(raw.time_step_limit.as_ref(), f)?;
    Ok(Mamba2Mixer {
        hidden,
        heads,
        head_dim,
        state,
        groups,
        kernel,
        bias: raw.use_bias.unwrap_or(false),
        out_bias: raw.use_bias.unwrap_or(false),
        conv_bias: raw.mamba_conv_bias.or(raw.use_conv_bias).unwrap_or(true),
        eps,
        gate_norm: GateNorm::GateThenNorm,
        scales: None,
        dt_min: None,
    })
}

/// The MoE blocks' fields: 8 experts of width 7688, top 2, a shared expert of 7688, DeepSeek-V3's
/// sigmoid router with `(n_group, topk_group)` `(1, 1)`, renormalised, `routed_scaling_factor`
/// 1; a latent projection (`moe_latent_size`) is refused.
fn read_moe(raw: &HfConfig, f: &Fields<'_>) -> Result<NemotronHMoe> {
    let experts = f.optional_count("n_routed_experts", raw.n_routed_experts, 8, MAX_EXPERTS)?;
    let top_k = f.optional_count(
        "num_experts_per_tok",
        raw.num_experts_per_tok,
        2,
        MAX_EXPERTS,
    )?;
    if top_k > experts {
        return Err(f.err(
            "num_experts_per_tok",
            &format!("{top_k} is more than the {experts} experts of a layer"),
        ));
    }
    if let Some(Some(_)) = raw.moe_latent_size {
        return Err(f.err(
            "moe_latent_size",
            "a latent projection around the experts is not supported (expected null)",
        ));
    }
    let width = |field: &str, v: Option<i64>| f.optional_count(field, v, 7688, MAX_WIDTH);
    Ok(NemotronHMoe {
        routing: (experts, top_k),
        intermediate: width("moe_intermediate_size", raw.moe_intermediate_size)?,
        shared: width(
            "moe_shared_expert_intermediate_size",
            raw.moe_shared_expert_intermediate_size,
        )?,
        router: Router::Grouped(sigmoid_router(raw, f, experts, (1, 1), (true, 1.0))?),
    })
}

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    let blocks = read_blocks(raw, f)?;
    let act = raw.mlp_hidden_act.as_deref().unwrap_or("relu2");
    if act != "relu2" {
        return Err(f.err(
            "mlp_hidden_act",
            &format!("`{act}` is not supported (expected \"relu2\")"),
        ));
    }
    let eps = f.number(
        "layer_norm_epsilon",
        raw.layer_norm_epsilon,
        1e-5,
        Sign::NonNegative,
    )?;
    let moe = match blocks.contains(&Block::Moe) {
        true => Some(read_moe(raw, f)?),
        false => None,
    };
    // The layer count is the blocks' (transformers ignores `num_hidden_layers`); attention
    // never has biases; no sliding window, no positions.
    let plain = HfConfig {
        num_hidden_layers: Some(blocks.len() as i64),
        num_attention_heads: raw.num_attention_heads.or(Some(32)),
        num_key_value_heads: raw.num_key_value_heads.or(Some(8)),
        intermediate_size: raw.intermediate_size.or(Some(21504)),
        max_position_embeddings: raw.max_position_embeddings.or(Some(4096)),
        attention_bias: Some(false),
        rms_norm_eps: Some(raw.layer_norm_epsilon.unwrap_or(1e-5)),
        layer_types: None,
        sliding_window: None,
        ..raw.clone()
    };
    read_decoder(&plain, t, f, &FIELDS, |dims| {
        Ok(NemotronH {
            mixer: read_mixer(raw, f, dims.hidden_size, eps)?,
            blocks,
            moe,
        })
    })
}

impl Family for NemotronH {
    fn names(&self) -> Names {
        Names {
            root: "backbone",
            embed: "embeddings",
            layers: "layers",
            attn: "mixer",
            o_proj: "o_proj",
            final_norm: "norm_f",
        }
    }

    fn layer_norms(&self) -> LayerNorms {
        LayerNorms {
            pre_attention: Some("norm"),
            post_attention: None,
            pre_mlp: Some("norm"),
            post_mlp: None,
        }
    }

    fn rotary_positions(&self, _cfg: &ArchConfig) -> bool {
        false
    }

    fn mixes_tokens(&self, _cfg: &ArchConfig, i: usize) -> bool {
        matches!(self.blocks[i], Block::Mamba | Block::Attention)
    }

    fn attention_with_mlp(&self) -> bool {
        false
    }

    fn ssm_mixer(&self, _cfg: &ArchConfig, i: usize) -> Option<SsmMixer> {
        (self.blocks[i] == Block::Mamba).then_some(SsmMixer::Mamba2(self.mixer))
    }

    /// The squared-ReLU MLP of `{layer}.mixer`, or its routed experts plus the shared expert.
    fn layer_mlp(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        layer: &str,
        i: usize,
        dtype: DType,
    ) -> String {
        let module = format!("{layer}.mixer");
        let moe = match (self.blocks[i], self.moe) {
            (Block::Moe, Some(moe)) => moe,
            _ => return squared_relu_mlp(b, cfg, x, (&module, "up_proj", "down_proj"), dtype),
        };
        let weights = ExpertWeights::Relu2PerExpert {
            router: "gate",
            up: "up_proj",
            down: "down_proj",
        };
        let spec = MoeSpec::new(cfg, moe.intermediate, moe.routing, moe.router, weights);
        let routed = spec.build(b, x, &module, dtype);
        let (h, w, bias) = (cfg.hidden_size, moe.shared, cfg.mlp_bias);
        let shared = format!("{module}.shared_experts");
        let up = linear(b, x, &format!("{shared}.up_proj"), h, w, bias, dtype);
        let relu = b.op("Relu", &[&up], vec![]);
        let squared = b.op("Mul", &[&relu, &relu], vec![]);
        let down = linear(
            b,
            &squared,
            &format!("{shared}.down_proj"),
            w,
            h,
            bias,
            dtype,
        );
        b.op("Add", &[&routed, &down], vec![])
    }
}

#[cfg(test)]
mod tests {
    use super::{Block, NemotronH};
    use crate::config::ArchConfig;

    fn parse(extra: &str) -> crate::Result<ArchConfig> {
        crate::models::parse_fields(
            r#""model_type": "nemotron_h", "hidden_size": 64, "intermediate_size": 128,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
            "vocab_size": 300, "mamba_num_heads": 8,
            "mamba_head_dim": 16, "ssm_state_size": 16, "n_groups": 2,
            "n_routed_experts": 4, "moe_intermediate_size": 32,
            "moe_shared_expert_intermediate_size": 32"#,
            extra,
        )
    }

    #[test]
    fn reads_the_blocks_in_every_spelling_and_the_mixer() {
        use Block::*;
        let c =
            parse(r#", "layers_block_type": ["linear_attention", "full_attention", "moe", "mlp"]"#)
                .unwrap();
        assert_eq!(c.num_hidden_layers, 4);
        let k = c.knobs::<NemotronH>().unwrap();
        assert_eq!(k.blocks, [Mamba, Attention, Moe, Mlp]);
        let m = k.mixer;
        assert_eq!(
            (m.heads, m.head_dim, m.state, m.groups, m.kernel),
            (8, 16, 16, 2, 4)
        );
        assert_eq!((m.bias, m.conv_bias), (false, true));
        let moe = k.moe.unwrap();
        assert_eq!(
            (moe.routing, moe.intermediate, moe.shared),
            ((4, 2), 32, 32)
        );
        assert!(!c.qkv_bias && !c.o_bias);
        let c = parse(r#", "hybrid_override_pattern": "M-M*-", "num_hidden_layers": 9"#).unwrap();
        assert_eq!(c.num_hidden_layers, 5);
        let k = c.knobs::<NemotronH>().unwrap();
        assert_eq!(k.blocks, [Mamba, Mlp, Mamba, Attention, Mlp]);
        assert_eq!(k.moe, None);
        let c = parse(r#", "layer_types": ["mamba", "attention"], "mamba_n_groups": 4"#).unwrap();
        let k = c.knobs::<NemotronH>().unwrap();
        assert_eq!(
            (k.blocks.as_slice(), k.mixer.groups),
            ([Mamba, Attention].as_slice(), 4)
        );
        let c = parse("").unwrap();
        let k = c.knobs::<NemotronH>().unwrap();
        assert_eq!(k.blocks, [Mamba, Moe, Attention, Mlp]);
    }

    #[test]
    fn hostile_values_are_refused_by_name() {
        let cases = [
            (
                r#", "layers_block_type": ["mamba", "conv"]"#,
                "layers_block_type",
            ),
            (r#", "layers_block_type": []"#, "layers_block_type"),
            (
                r#", "hybrid_override_pattern": "M+""#,
                "hybrid_override_pattern",
            ),
            (r#", "n_groups": 3"#, "n_groups"),
            (r#", "mamba_head_dim": 0"#, "mamba_head_dim"),
            (r#", "conv_kernel": 1"#, "conv_kernel"),
            (r#", "ssm_state_size": 1048576"#, "ssm_state_size"),
            (r#", "mamba_hidden_act": "gelu""#, "mamba_hidden_act"),
            (r#", "mlp_hidden_act": "silu""#, "mlp_hidden_act"),
            (r#", "time_step_limit": [0.0, 0.1]"#, "time_step_limit"),
            (r#", "layer_norm_epsilon": -1"#, "layer_norm_epsilon"),
            (r#", "num_experts_per_tok": 5"#, "num_experts_per_tok"),
            (r#", "n_routed_experts": 0"#, "n_routed_experts"),
            (r#", "moe_latent_size": 16"#, "moe_latent_size"),
            (r#", "n_group": 3"#, "n_group"),
        ];
        for (extra, field) in cases {
            let err = parse(extra).unwrap_err();
            assert!(err.to_string().contains(field), "{extra}: {err}");
        }
    }
}
