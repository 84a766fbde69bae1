//! Zamba2 (Zyphra): Mamba2 layers (pre-norm mixer and residual, [`super::components::ssm`])
//! with shared transformer blocks applied before the mixer of the `hybrid` layers. A hybrid
//! layer `i` (the `k`-th) runs shared block `k mod num_mem_blocks` (its weights stored under
//! the first hybrid layer that used it, `layers.{j}.shared_transformer`) on the concatenation
//! of the residual stream and the original token embeddings (`2·hidden_size` wide: RMS norm,
//! attention of `2·hidden_size / num_attention_heads` channels per head scaled by
//! `(head_dim / 2)^-½`, RoPE with `use_mem_rope`, `o_proj` back to `hidden_size`; then
//! `pre_ff_layernorm` and a gated MLP from a fused `gate_up_proj`, no residual inside), with the
//! `k`-th LoRA adapters of the block (`linear_{q,k,v}_adapter_list.{k}` where
//! `use_shared_attention_adapter`, `gate_up_proj_adapter_list.{k}` always) added to its
//! projections; the result goes through the layer's own `linear` and is added to the stream
//! before the layer's Mamba2 norm (`mamba_decoder`). A hybrid layer carries its KV cache and its
//! mixer's conv and SSM states ([`LayerCache::KvAndSsm`]), a Mamba2 layer its two states.
//! onnxruntime-genai 0.18 has no such model type: no genai_config.json (docs/recurrent.md).

use std::collections::HashSet;

use super::components::ssm_config::{Mamba2Fields, Mamba2Sizes};
use super::components::{
    attention, hybrid_decoder_io, mamba2_mixer, padding_mask, present_conv_name, present_ssm_name,
    rope_tables, rotary_embedding, AttentionSpec, ConvState, DecoderDims, GateActivation, GateNorm,
    LayerCache, LayerPast, Mamba2Mixer, SsmMixer, SsmState,
};
use super::decoder::token_mask;
use super::family::FamilySpec;
use crate::config::{
    read_decoder, ArchConfig, DecoderFields, FamilyKnobs, Fields, Gelu, HfConfig, ModelType, Sign,
};
use crate::ir::{Attr, DType, Graph, GraphBuilder, Initializer, TensorSource};
use crate::limits::config::{MAX_CONV_KERNEL, MAX_HEADS, MAX_LAYERS, MAX_WIDTH};
use crate::Result;

/// The family's registry entry.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "zamba2",
    summary: "hybrid: Mamba2 layers and shared transformer blocks (on the stream concatenated \
              with the embeddings, LoRA adapters per use) before the hybrid layers' mixers; \
              KV cache, conv and SSM states carried",
    model_types: &[ModelType {
        name: "zamba2",
        genai_type: None,
        read,
        builds_longrope: false,
    }],
};

/// transformers' Zamba2Config: `rms_norm_eps` 1e-5, RoPE theta 1e4, tied, no attention bias.
const FIELDS: DecoderFields = DecoderFields {
    silu_mlp: false,
    rms_norm_eps: 1e-5,
    tie_word_embeddings: true,
    use_sliding_window: false,
    ..DecoderFields::LLAMA
};

/// Zamba2's knobs.
#[derive(Debug, Clone, PartialEq)]
pub struct Zamba2 {
    /// Per layer, whether it is a hybrid layer (a shared block before its mixer).
    pub hybrid: Vec<bool>,
    /// `num_mem_blocks`: hybrid use `k` runs block `k mod num_mem_blocks`.
    pub mem_blocks: usize,
    /// The Mamba2 mixer of every layer.
    pub mixer: Mamba2Mixer,
    /// Whether q, k and v have LoRA adapters (`use_shared_attention_adapter`).
    pub attention_adapters: bool,
    /// `adapter_rank`.
    pub adapter_rank: usize,
    /// Whether the shared attention rotates q and k (`use_mem_rope`).
    pub rope: bool,
    /// The shared MLP's activation (`hidden_act`).
    pub act: GateActivation,
    /// Biases on the shared MLP's projections (`add_bias_linear`).
    pub mlp_bias: bool,
}

impl Zamba2 {
    /// The checkpoint layer index whose `shared_transformer` holds the weights of hybrid use
    /// `k`: the `(k mod num_mem_blocks)`-th hybrid layer.
    pub fn block_layer(&self, k: usize) -> usize {
        let hybrids = self.hybrid.iter().enumerate().filter(|(_, h)| **h);
        hybrids
            .map(|(i, _)| i)
            .nth(k % self.mem_blocks)
            .unwrap_or(0)
    }
}

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    let layers = f.positive("num_hidden_layers", raw.num_hidden_layers, MAX_LAYERS)?;
    let hybrid: Vec<bool> = match &raw.layers_block_type {
        None if layers == 54 => {
            // transformers' default pattern for its 54 layers.
            let mut v = vec![false; 54];
            for i in [6, 12, 18, 24, 30, 36, 42, 47, 51] {
                v[i] = true;
            }
            v
        }
        None => {
            return Err(f.err(
                "layers_block_type",
                &format!("is required for {layers} layers (transformers' default has 54)"),
            ))
        }
        Some(types) if types.len() != layers => {
            return Err(f.err(
                "layers_block_type",
                &format!(
                    "{} entries for {layers} layers (num_hidden_layers)",
                    types.len()
                ),
            ))
        }
        Some(types) => types
            .iter()
            .map(|t| match t.as_str() {
                "mamba" | "linear_attention" => Ok(false),
                "hybrid" => Ok(true),
                other => Err(f.err(
                    "layers_block_type",
                    &format!("`{other}` is not a Zamba2 layer type (mamba, hybrid)"),
                )),
            })
            .collect::<Result<_>>()?,
    };
    let hidden = f.positive("hidden_size", raw.hidden_size, MAX_WIDTH)?;
    let heads = f.positive("num_attention_heads", raw.num_attention_heads, MAX_HEADS)?;
    let wide = 2 * hidden;
    if wide % heads != 0 {
        return Err(f.err(
            "num_attention_heads",
            &format!("{heads} must divide 2 × hidden_size ({wide})"),
        ));
    }
    let adapters = raw.use_shared_attention_adapter.unwrap_or(false);
    let kv_heads = raw.num_key_value_heads.unwrap_or(heads as i64);
    if adapters && kv_heads != heads as i64 {
        return Err(f.err(
            "num_key_value_heads",
            &format!(
                "{kv_heads} must equal num_attention_heads ({heads}) with \
                 use_shared_attention_adapter (the adapters are 2 × hidden_size wide)"
            ),
        ));
    }
    let mem_blocks = f.optional_count("num_mem_blocks", raw.num_mem_blocks, 1, MAX_LAYERS)?;
    let adapter_rank = f.optional_count("adapter_rank", raw.adapter_rank, 128, MAX_WIDTH)?;
    if raw.use_long_context == Some(true) {
        return Err(f.err(
            "use_long_context",
            "true is not supported (its rescaled RoPE is not built)",
        ));
    }
    let act_name = raw.hidden_act.as_deref().unwrap_or("gelu");
    let act = match act_name {
        "silu" | "swish" => GateActivation::Silu,
        other => match Gelu::from_hf_name(other) {
            Some(g) => GateActivation::Gelu(g),
            None => {
                return Err(f.err(
                    "hidden_act",
                    &format!("`{other}` is not supported (silu or {})", Gelu::NAMES),
                ))
            }
        },
    };
    let mixer = read_mixer(raw, f, hidden)?;
    let intermediate = match raw.intermediate_size {
        Some(i) => f.count("intermediate_size", i, MAX_WIDTH)?,
        None if 4 * hidden <= MAX_WIDTH => 4 * hidden,
        None => return Err(f.err("hidden_size", "4 × hidden_size exceeds the width limit")),
    };
    let plain = HfConfig {
        layer_types: None,
        sliding_window: None,
        head_dim: Some((wide / heads) as i64),
        num_key_value_heads: Some(kv_heads),
        intermediate_size: Some(intermediate as i64),
        attention_bias: Some(false),
        mlp_bias: raw.add_bias_linear,
        ..raw.clone()
    };
    let knobs = Zamba2 {
        hybrid,
        mem_blocks,
        mixer,
        attention_adapters: adapters,
        adapter_rank,
        rope: raw.use_mem_rope.unwrap_or(false),
        act,
        mlp_bias: raw.add_bias_linear.unwrap_or(false),
    };
    read_decoder(&plain, t, f, &FIELDS, |_| Ok(knobs))
}

/// The Mamba2 mixer of Zamba2Config's fields: `n_mamba_heads` 8 of `mamba_expand · hidden /
/// n_mamba_heads` channels (expand 2), `mamba_ngroups` 1, state 64, kernel 4, the conv bias
/// always on, projection biases per `add_bias_linear`, the gated norm after the gate with
/// epsilon 1e-5, the time steps clamped below at `time_step_min` (1e-3).
fn read_mixer(raw: &HfConfig, f: &Fields<'_>, hidden: usize) -> Result<Mamba2Mixer> {
    let heads = f.optional_count("n_mamba_heads", raw.n_mamba_heads, 8, MAX_HEADS)?;
    let groups = f.optional_count("mamba_ngroups", raw.mamba_ngroups, 1, MAX_HEADS)?;
    let state = f.optional_count("mamba_d_state", raw.mamba_d_state, 64, MAX_WIDTH)?;
    let kernel = f.optional_count("mamba_d_conv", raw.mamba_d_conv, 4, MAX_CONV_KERNEL)?;
    let expand = f.optional_count("mamba_expand", raw.mamba_expand, 2, MAX_WIDTH)?;
    let intermediate = expand as u64 * hidden as u64;
    if intermediate > MAX_WIDTH as u64 || intermediate % heads as u64 != 0 {
        return Err(f.err(
            "n_mamba_heads",
            &format!(
                "{heads} must divide mamba_expand × hidden_size ({expand} × {hidden}, at most \
                 {MAX_WIDTH})"
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
        heads: "n_mamba_heads",
        groups: "mamba_ngroups",
        state: "mamba_d_state",
        width: "mamba_expand·hidden_size",
    };
    sizes.check(f, &names)?;
    let bias = raw.add_bias_linear.unwrap_or(false);
    let dt_min = f.number("time_step_min", raw.time_step_min, 1e-3, Sign::NonNegative)?;
    Ok(Mamba2Mixer {
        hidden,
        heads,
        head_dim: intermediate as usize / heads,
        state,
        groups,
        kernel,
        bias,
        out_bias: bias,
        conv_bias: true,
        eps: 1e-5,
        gate_norm: GateNorm::GateThenNorm,
        scales: None,
        dt_min: Some(dt_min),
    })
}

/// The graph's builder: the shared blocks' weights are declared once, whichever hybrid layers
/// use them.
struct Builder<'a> {
    b: GraphBuilder,
    cfg: &'a ArchConfig,
    k: &'a Zamba2,
    dtype: DType,
    declared: HashSet<String>,
}

impl Builder<'_> {
    /// `x @ {prefix}.weight_t (+ {prefix}.bias)`, each weight declared on its first use.
    fn linear(&mut self, x: &str, prefix: &str, (inp, out): (usize, usize), bias: bool) -> String {
        let w = self.param(
            &format!("{prefix}.weight_t"),
            vec![inp, out],
            TensorSource::Transpose(Box::new(TensorSource::Checkpoint(format!(
                "{prefix}.weight"
            )))),
        );
        let y = self.b.op("MatMul", &[x, &w], vec![]);
        if !bias {
            return y;
        }
        let name = format!("{prefix}.bias");
        let bias = self.param(&name, vec![out], TensorSource::Checkpoint(name.clone()));
        self.b.op("Add", &[&y, &bias], vec![])
    }

    /// Initializer `name` in the model dtype, declared on its first use.
    fn param(&mut self, name: &str, shape: Vec<usize>, source: TensorSource) -> String {
        if self.declared.insert(name.to_string()) {
            self.b.initializer(Initializer {
                name: name.to_string(),
                dtype: self.dtype,
                shape,
                source: Some(source),
            });
        }
        name.to_string()
    }

    /// The RMS norm `{module}.weight` of `x` (`width` channels).
    fn norm(&mut self, x: &str, module: &str, width: usize) -> String {
        let name = format!("{module}.weight");
        let w = self.param(&name, vec![width], TensorSource::Checkpoint(name.clone()));
        let eps = self.cfg.rms_norm_eps;
        self.b.op(
            "RMSNormalization",
            &[x, &w],
            vec![("axis", Attr::Int(-1)), ("epsilon", Attr::Float(eps))],
        )
    }

    /// `linear(x) + up(down(x))`: a projection plus its LoRA adapter `{adapter}.0` / `.1`.
    fn adapted(
        &mut self,
        x: &str,
        (proj, adapter): (&str, Option<String>),
        (inp, out): (usize, usize),
        bias: bool,
    ) -> String {
        let y = self.linear(x, proj, (inp, out), bias);
        let Some(adapter) = adapter else {
            return y;
        };
        let r = self.k.adapter_rank;
        let down = self.linear(x, &format!("{adapter}.0"), (inp, r), false);
        let up = self.linear(&down, &format!("{adapter}.1"), (r, out), false);
        self.b.op("Add", &[&y, &up], vec![])
    }
}

impl FamilyKnobs for Zamba2 {
    fn build(&self, cfg: &ArchConfig, dtype: DType) -> Graph {
        let (h, heads, kv, d) = (
            cfg.hidden_size,
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
            cfg.head_dim,
        );
        let mixer = SsmMixer::Mamba2(self.mixer);
        let caches: Vec<LayerCache> = self
            .hybrid
            .iter()
            .map(|&hy| match hy {
                true => LayerCache::KvAndSsm(mixer),
                false => LayerCache::Ssm(mixer),
            })
            .collect();
        let mut s = Builder {
            b: GraphBuilder::new("main_graph"),
            cfg,
            k: self,
            dtype,
            declared: HashSet::new(),
        };
        let dims = DecoderDims {
            layers: cfg.num_hidden_layers,
            kv_heads: kv,
            head_dim: d,
            vocab: cfg.vocab_size,
            position_rows: None,
        };
        let io = hybrid_decoder_io(&mut s.b, dims, dtype, &caches);
        s.b.set_scope("model.embed_tokens");
        let embed = s.param(
            "model.embed_tokens.weight",
            vec![cfg.vocab_size, h],
            TensorSource::Checkpoint("model.embed_tokens.weight".into()),
        );
        let embeddings = s.b.op(
            "Gather",
            &[&embed, &io.input_ids],
            vec![("axis", Attr::Int(0))],
        );
        s.b.set_scope("model.rotary_emb");
        let tables = self.rope.then(|| {
            let positions = cfg.max_position_embeddings;
            rope_tables(&mut s.b, &cfg.rope, positions, &io.position_ids, dtype)
        });
        s.b.set_scope("model.mask");
        let mask = padding_mask(&mut s.b, &io.input_ids, &io.attention_mask);
        let tokens = token_mask(&mut s.b, &io, dtype);

        let mut x = embeddings.clone();
        let mut uses = 0;
        for i in 0..cfg.num_hidden_layers {
            let p = format!("model.layers.{i}");
            s.b.set_scope(&p);
            let (input, mamba) = match &io.past[i] {
                LayerPast::KvAndSsm { key, value, .. } => {
                    let block =
                        format!("model.layers.{}.shared_transformer", self.block_layer(uses));
                    let cat =
                        s.b.op("Concat", &[&x, &embeddings], vec![("axis", Attr::Int(-1))]);
                    let normed = s.norm(&cat, &format!("{block}.input_layernorm"), 2 * h);
                    let attn = format!("{block}.self_attn");
                    let adapter = |name: &str| {
                        self.attention_adapters
                            .then(|| format!("{attn}.linear_{name}_adapter_list.{uses}"))
                    };
                    let q = s.adapted(
                        &normed,
                        (&format!("{attn}.q_proj"), adapter("q")),
                        (2 * h, heads * d),
                        false,
                    );
                    let k = s.adapted(
                        &normed,
                        (&format!("{attn}.k_proj"), adapter("k")),
                        (2 * h, kv * d),
                        false,
                    );
                    let v = s.adapted(
                        &normed,
                        (&format!("{attn}.v_proj"), adapter("v")),
                        (2 * h, kv * d),
                        false,
                    );
                    let (q, k) = match &tables {
                        Some(t) => (
                            rotary_embedding(&mut s.b, &q, t, &cfg.rope, heads, d),
                            rotary_embedding(&mut s.b, &k, t, &cfg.rope, kv, d),
                        ),
                        None => (q, k),
                    };
                    let present = (format!("present.{i}.key"), format!("present.{i}.value"));
                    let spec = AttentionSpec {
                        q_heads: heads,
                        kv_heads: kv,
                        scale: (d as f32 / 2.0).powf(-0.5),
                        mask: &mask,
                        past: (key, value),
                        present: (&present.0, &present.1),
                        index: None,
                    };
                    let y = attention(&mut s.b, &q, &k, &v, &spec);
                    let o = s.linear(&y, &format!("{attn}.o_proj"), (heads * d, h), false);
                    let o = s.norm(&o, &format!("{block}.pre_ff_layernorm"), h);
                    let ff = format!("{block}.feed_forward");
                    let inner = cfg.intermediate_size;
                    let gate_up = s.adapted(
                        &o,
                        (
                            &format!("{ff}.gate_up_proj"),
                            Some(format!("{ff}.gate_up_proj_adapter_list.{uses}")),
                        ),
                        (h, 2 * inner),
                        self.mlp_bias,
                    );
                    let [gate, up] = split2(&mut s.b, &gate_up, inner);
                    let gate = match self.act {
                        GateActivation::Silu => {
                            let sig = s.b.op("Sigmoid", &[&gate], vec![]);
                            s.b.op("Mul", &[&gate, &sig], vec![])
                        }
                        GateActivation::Gelu(form) => s.b.op(
                            "Gelu",
                            &[&gate],
                            vec![("approximate", Attr::String(form.approximate().into()))],
                        ),
                    };
                    let prod = s.b.op("Mul", &[&gate, &up], vec![]);
                    let m = s.linear(&prod, &format!("{ff}.down_proj"), (inner, h), self.mlp_bias);
                    let t = s.linear(&m, &format!("{p}.linear"), (h, h), false);
                    uses += 1;
                    (
                        s.b.op("Add", &[&x, &t], vec![]),
                        format!("{p}.mamba_decoder"),
                    )
                }
                _ => (x.clone(), p.clone()),
            };
            let (conv, ssm) = match &io.past[i] {
                LayerPast::KvAndSsm { conv, ssm, .. } | LayerPast::Ssm { conv, ssm, .. } => {
                    (conv.clone(), ssm.clone())
                }
                _ => unreachable!("every Zamba2 layer carries a mixer's states"),
            };
            let normed = s.norm(&input, &format!("{mamba}.input_layernorm"), h);
            let (conv_out, ssm_out) = (present_conv_name(i), present_ssm_name(i, mixer));
            let state = SsmState {
                conv: ConvState {
                    past: &conv,
                    present: &conv_out,
                },
                past: &ssm,
                present: &ssm_out,
            };
            let module = format!("{mamba}.mamba");
            let y = mamba2_mixer(
                &mut s.b, &normed, &module, self.mixer, state, &tokens, dtype,
            );
            x = s.b.op("Add", &[&x, &y], vec![]);
        }

        s.b.set_scope("model.final_layernorm");
        let normed = s.norm(&x, "model.final_layernorm", h);
        s.b.set_scope("lm_head");
        let head = if cfg.tie_word_embeddings {
            s.b.op(
                "Transpose",
                &[&embed],
                vec![("perm", Attr::Ints(vec![1, 0]))],
            )
        } else {
            s.param(
                "lm_head.weight_t",
                vec![h, cfg.vocab_size],
                TensorSource::Transpose(Box::new(TensorSource::Checkpoint(
                    "lm_head.weight".into(),
                ))),
            )
        };
        s.b.op_into("MatMul", &[&normed, &head], vec![], "logits");
        s.b.finish()
    }
}

/// `x` split in two halves of `half` channels on its last axis.
fn split2(b: &mut GraphBuilder, x: &str, half: usize) -> [String; 2] {
    let parts: [String; 2] = std::array::from_fn(|_| b.fresh_name("Split"));
    let sizes = b.const_i64(&[half as i64, half as i64]);
    b.node(
        "",
        "Split",
        &[x, &sizes],
        vec![("axis", Attr::Int(-1))],
        parts.to_vec(),
    );
    parts
}

#[cfg(test)]
mod tests {
    use super::Zamba2;
    use crate::config::ArchConfig;

    fn parse(extra: &str) -> crate::Result<ArchConfig> {
        crate::models::parse_fields(
            r#""model_type": "zamba2", "hidden_size": 64, "intermediate_size": 128,
            "num_attention_heads": 4, "num_hidden_layers": 4, "vocab_size": 300,
            "max_position_embeddings": 128, "n_mamba_heads": 8, "mamba_d_state": 16,
            "mamba_ngroups": 2, "layers_block_type": ["mamba", "hybrid", "mamba", "hybrid"]"#,
            extra,
        )
    }

    #[test]
    fn reads_layers_blocks_and_the_mixer() {
        let c = parse(r#", "num_mem_blocks": 1, "use_shared_attention_adapter": true"#).unwrap();
        assert_eq!((c.head_dim, c.num_key_value_heads), (32, 4));
        let k = c.knobs::<Zamba2>().unwrap();
        assert_eq!(k.hybrid, [false, true, false, true]);
        assert_eq!((k.block_layer(0), k.block_layer(1)), (1, 1));
        assert_eq!(
            (k.mixer.heads, k.mixer.head_dim, k.mixer.groups),
            (8, 16, 2)
        );
        let two = parse(r#", "num_mem_blocks": 2"#).unwrap();
        let k = two.knobs::<Zamba2>().unwrap();
        assert_eq!(
            (k.block_layer(0), k.block_layer(1), k.block_layer(2)),
            (1, 3, 1)
        );
        assert!(c.tie_word_embeddings);
        assert_eq!(k.mixer.dt_min, Some(1e-3));
    }

    #[test]
    fn hostile_values_are_refused_by_name() {
        let cases = [
            (r#", "layers_block_type": ["mamba"]"#, "layers_block_type"),
            (
                r#", "layers_block_type": ["mamba", "attention", "mamba", "hybrid"]"#,
                "layers_block_type",
            ),
            (r#", "num_attention_heads": 3"#, "num_attention_heads"),
            (
                r#", "use_shared_attention_adapter": true, "num_key_value_heads": 2"#,
                "num_key_value_heads",
            ),
            (r#", "num_mem_blocks": 0"#, "num_mem_blocks"),
            (r#", "n_mamba_heads": 7"#, "n_mamba_heads"),
            (r#", "mamba_ngroups": 3"#, "mamba_ngroups"),
            (r#", "mamba_d_conv": 1"#, "mamba_d_conv"),
            (r#", "use_long_context": true"#, "use_long_context"),
            (r#", "hidden_act": "relu""#, "hidden_act"),
            (r#", "time_step_min": -1"#, "time_step_min"),
        ];
        for (extra, field) in cases {
            let err = parse(extra).unwrap_err();
            assert!(err.to_string().contains(field), "{extra}: {err}");
        }
    }
}
