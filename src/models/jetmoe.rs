//! JetMoE: a pre-norm RMSNorm decoder whose attention and MLP are both mixtures of experts.
//!
//! The attention is a mixture of attention heads (MoA): a router (`experts.router.layer`,
//! softmax of its top-k logits, in f32) picks `num_experts_per_tok` (k) of `num_local_experts`
//! (E) query experts per token; expert `e` projects the token to `num_key_value_heads` query
//! heads of `kv_channels` (`experts.input_linear.weight` `[E, Hkv·D, H]`), so a token has
//! `k · Hkv` query heads, and slot `j`'s head `i` attends with key/value head `i` (keys and
//! values from one shared `kv_proj`, `[2·Hkv·D, H]`, keys first). Each slot's attention
//! output goes back through its expert's output projection (`experts.output_linear.weight`
//! `[E, H, Hkv·D]`), weighted by its routing weight; the slots are summed and
//! `experts.bias` added. The MLP is a sparse mixture of SwiGLU experts stored stacked
//! (`mlp.input_linear` `[E, 2·I, H]`, `mlp.output_linear` `[E, H, I]`, router
//! `mlp.router.layer`, the same routing) plus `mlp.bias`. The layer norms' epsilon is fixed at
//! 1e-6; the final norm's is `rms_norm_eps`.
//!
//! # Form
//!
//! Query heads are ordered by key/value head (`i·k + j`) so that opset-24 `Attention`'s
//! grouped-query mapping (query head `h` reads kv head `h / k`) is JetMoE's. As the MoE block
//! ([`sparse_moe`](super::components::sparse_moe)), the experts are computed densely: every
//! query expert projects every token (`x @ [E·Hkv·D]` columns) and a one-hot `[B, S, k, E]`
//! picks each slot's; the slots' outputs, scattered to their experts by the weighted one-hot,
//! meet the output projections stacked `[E·Hkv·D, H]`. An unpicked expert adds exact zeros.

use super::components::{linear, ExpertWeights, MoeSpec, Norm, NormKind, Router};
use super::decoder::{Family, Names};
use super::family::{without_windows, FamilySpec};
use crate::config::ModelType;
use crate::config::{
    read_decoder, read_routing, ArchConfig, Biases, DecoderFields, Fields, HfConfig,
};
use crate::ir::{Attr, DType, GraphBuilder, Initializer, TensorSource};
use crate::limits::config::{MAX_HEADS, MAX_WIDTH};
use crate::Result;

/// The family's registry entry.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "jetmoe",
    summary: "mixture of attention heads (routed query and output projections, shared \
              key/value heads) and sparse SwiGLU experts stored stacked, each with an output bias",
    model_types: &[ModelType::generative("jetmoe", "decoder", read)],
};

/// transformers' JetMoeConfig: no biases on the projections, RoPE theta 1e4, tied,
/// `rms_norm_eps` 1e-6 (the final norm's), no sliding window.
const FIELDS: DecoderFields = DecoderFields {
    biases: Biases::None,
    silu_mlp: false,
    tie_word_embeddings: true,
    ..DecoderFields::LLAMA
};

/// The layer norms' epsilon (JetMoeRMSNorm's default; the config's is the final norm's).
const LAYER_NORM_EPS: f32 = 1e-6;

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    let mut raw = without_windows(raw);
    let (experts, top_k) = read_routing(&raw, f, (8, 2))?;
    let act = raw.activation_function.as_deref().unwrap_or("silu");
    if act != "silu" && act != "swish" {
        return Err(f.err(
            "activation_function",
            &format!("`{act}` is not supported for jetmoe (expected \"silu\")"),
        ));
    }
    // `kv_channels` is the head dim (`head_dim` its alias); the query heads are the kv heads
    // of every picked expert, whatever config.json says of `num_attention_heads`.
    let kv_heads = f.optional_count(
        "num_key_value_heads",
        raw.num_key_value_heads,
        16,
        MAX_HEADS,
    )?;
    let head_dim = match (raw.kv_channels, raw.head_dim) {
        (Some(v), _) => f.count("kv_channels", v, MAX_WIDTH)?,
        (None, Some(v)) => f.count("head_dim", v, MAX_WIDTH)?,
        (None, None) => 128,
    };
    raw.num_key_value_heads = Some(kv_heads as i64);
    raw.num_attention_heads = Some((kv_heads * top_k) as i64);
    raw.head_dim = Some(head_dim as i64);
    read_decoder(&raw, t, f, &FIELDS, |_| Ok(JetMoe { experts, top_k }))
}

/// JetMoE's knobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JetMoe {
    /// `num_local_experts`: of attention and of the MLP.
    pub experts: usize,
    /// `num_experts_per_tok`.
    pub top_k: usize,
}

impl Family for JetMoe {
    fn names(&self) -> Names {
        Names {
            attn: "self_attention",
            ..Names::LLAMA
        }
    }

    fn norm(&self, _cfg: &ArchConfig) -> Norm {
        Norm {
            kind: NormKind::Rms,
            eps: LAYER_NORM_EPS,
        }
    }

    fn final_norm_of(&self, cfg: &ArchConfig) -> Norm {
        Norm {
            kind: NormKind::Rms,
            eps: cfg.rms_norm_eps,
        }
    }

    fn qkv(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        attn: &str,
        dtype: DType,
    ) -> [String; 3] {
        let (h, e, k) = (cfg.hidden_size, self.experts, self.top_k);
        let (kv, d, hkv) = (cfg.kv_size(), cfg.head_dim, cfg.num_key_value_heads);
        let experts = format!("{attn}.experts");
        let one_hot = self.routing(b, cfg, x, &experts, &routing_name(attn), dtype);

        // Every expert's queries [B, S, E, Hkv·D], each slot's picked by the one-hot.
        let w_in = b.initializer(Initializer {
            name: format!("{experts}.input_linear.weight_t"),
            dtype,
            shape: vec![h, e * kv],
            source: Some(TensorSource::Transpose(Box::new(TensorSource::Reshape {
                source: Box::new(TensorSource::Checkpoint(format!(
                    "{experts}.input_linear.weight"
                ))),
                shape: vec![e * kv, h],
            }))),
        });
        let q_all = b.op("MatMul", &[x, &w_in], vec![]);
        let per_expert = b.const_i64(&[0, 0, e as i64, kv as i64]);
        let q_all = b.op("Reshape", &[&q_all, &per_expert], vec![]);
        let q = b.op("MatMul", &[&one_hot, &q_all], vec![]);
        // [B, S, k, Hkv, D] → [B, S, Hkv, k, D]: query heads grouped by kv head.
        let split = b.const_i64(&[0, 0, k as i64, hkv as i64, d as i64]);
        let q = b.op("Reshape", &[&q, &split], vec![]);
        let q = b.op(
            "Transpose",
            &[&q],
            vec![("perm", Attr::Ints(vec![0, 1, 3, 2, 4]))],
        );
        let merged = b.const_i64(&[0, 0, (k * kv) as i64]);
        let q = b.op("Reshape", &[&q, &merged], vec![]);

        let fused = format!("{attn}.kv_proj.weight");
        let mut half = |part: usize, name: &str| {
            let w = b.initializer(Initializer {
                name: format!("{attn}.{name}.weight_t"),
                dtype,
                shape: vec![h, kv],
                source: Some(TensorSource::Transpose(Box::new(TensorSource::Slice {
                    source: Box::new(TensorSource::Checkpoint(fused.clone())),
                    axis: 0,
                    start: part * kv,
                    len: kv,
                    total: 2 * kv,
                }))),
            });
            b.op("MatMul", &[x, &w], vec![])
        };
        let key = half(0, "k_proj");
        let value = half(1, "v_proj");
        [q, key, value]
    }

    fn o_proj(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        y: &str,
        attn: &str,
        dtype: DType,
    ) -> String {
        let (h, e, k) = (cfg.hidden_size, self.experts, self.top_k);
        let (kv, d, hkv) = (cfg.kv_size(), cfg.head_dim, cfg.num_key_value_heads);
        let experts = format!("{attn}.experts");
        // [B, S, Hkv·k·D] → [B, S, k, Hkv·D]: each slot's heads together again.
        let split = b.const_i64(&[0, 0, hkv as i64, k as i64, d as i64]);
        let y = b.op("Reshape", &[y, &split], vec![]);
        let y = b.op(
            "Transpose",
            &[&y],
            vec![("perm", Attr::Ints(vec![0, 1, 3, 2, 4]))],
        );
        let slots = b.const_i64(&[0, 0, k as i64, kv as i64]);
        let y = b.op("Reshape", &[&y, &slots], vec![]);
        // Weighted slots scattered to their experts: [B, S, E, k] @ [B, S, k, Hkv·D].
        let weights = b.op(
            "Transpose",
            &[&routing_name(attn)],
            vec![("perm", Attr::Ints(vec![0, 1, 3, 2]))],
        );
        let per_expert = b.op("MatMul", &[&weights, &y], vec![]);
        let flat = b.const_i64(&[0, 0, (e * kv) as i64]);
        let per_expert = b.op("Reshape", &[&per_expert, &flat], vec![]);
        let w_out = b.initializer(Initializer {
            name: format!("{experts}.output_linear.weight_t"),
            dtype,
            shape: vec![e * kv, h],
            source: Some(stacked_transposed(
                &format!("{experts}.output_linear.weight"),
                e,
                [h, kv],
            )),
        });
        let out = b.op("MatMul", &[&per_expert, &w_out], vec![]);
        add_bias(b, &out, &format!("{experts}.bias"), h, dtype)
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
        let spec = MoeSpec::new(
            cfg,
            cfg.intermediate_size,
            (self.experts, self.top_k),
            Router::Softmax { normalize: true },
            ExpertWeights::GRANITE_MOE,
        );
        let mlp = format!("{layer}.mlp");
        let y = spec.build(b, x, &mlp, dtype);
        add_bias(b, &y, &format!("{mlp}.bias"), cfg.hidden_size, dtype)
    }
}

impl JetMoe {
    /// The attention router of module `experts` on `x`: returns the one-hot of each slot's
    /// expert (`[B, S, k, E]`, model dtype) and writes value `weighted`, the same weighted by
    /// the slot's routing weight (the softmax of the top-k logits, computed in f32).
    fn routing(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        experts: &str,
        weighted: &str,
        dtype: DType,
    ) -> String {
        let cast = |b: &mut GraphBuilder, v: &str, to: DType| {
            b.op("Cast", &[v], vec![("to", Attr::Int(to.onnx_code() as i64))])
        };
        let router = format!("{experts}.router.layer");
        let logits = linear(b, x, &router, cfg.hidden_size, self.experts, false, dtype);
        let logits = match dtype {
            DType::F32 => logits,
            _ => cast(b, &logits, DType::F32),
        };
        let (top, picked) = (b.fresh_name("TopK"), b.fresh_name("TopK_indices"));
        let k = b.const_i64(&[self.top_k as i64]);
        b.node(
            "",
            "TopK",
            &[&logits, &k],
            vec![("axis", Attr::Int(-1))],
            vec![top.clone(), picked.clone()],
        );
        let gates = b.op("Softmax", &[&top], vec![("axis", Attr::Int(-1))]);
        let last = b.const_i64(&[-1]);
        let picked = b.op("Unsqueeze", &[&picked, &last], vec![]);
        let ids: Vec<i64> = (0..self.experts as i64).collect();
        let ids = b.const_i64(&ids);
        let one_hot = b.op("Equal", &[&picked, &ids], vec![]);
        let one_hot = cast(b, &one_hot, DType::F32);
        let gates = b.op("Unsqueeze", &[&gates, &last], vec![]);
        if dtype == DType::F32 {
            b.op_into("Mul", &[&one_hot, &gates], vec![], weighted);
            return one_hot;
        }
        let product = b.op("Mul", &[&one_hot, &gates], vec![]);
        let to = ("to", Attr::Int(dtype.onnx_code() as i64));
        b.op_into("Cast", &[&product], vec![to], weighted);
        cast(b, &one_hot, dtype)
    }
}

/// The name of attention module `attn`'s weighted routing one-hot (`[B, S, k, E]`), which
/// [`Family::qkv`] writes and [`Family::o_proj`] reads.
fn routing_name(attn: &str) -> String {
    format!("{attn}.experts.routing")
}

/// Checkpoint tensor `name` (`[E, out, in]`: one `[out, in]` matrix per expert) as the
/// experts' transposed matrices stacked, `[E·in, out]`.
fn stacked_transposed(name: &str, experts: usize, [out, inp]: [usize; 2]) -> TensorSource {
    let expert = |e: usize| {
        TensorSource::Transpose(Box::new(TensorSource::Reshape {
            source: Box::new(TensorSource::Slice {
                source: Box::new(TensorSource::Checkpoint(name.to_string())),
                axis: 0,
                start: e,
                len: 1,
                total: experts,
            }),
            shape: vec![out, inp],
        }))
    };
    TensorSource::Concat {
        parts: (0..experts).map(expert).collect(),
        axis: 0,
    }
}

/// `y` plus checkpoint vector `name` (`[width]`).
fn add_bias(b: &mut GraphBuilder, y: &str, name: &str, width: usize, dtype: DType) -> String {
    let bias = b.initializer(Initializer {
        name: name.to_string(),
        dtype,
        shape: vec![width],
        source: Some(TensorSource::Checkpoint(name.to_string())),
    });
    b.op("Add", &[y, &bias], vec![])
}

#[cfg(test)]
mod tests {
    use super::JetMoe;

    fn parse(extra: &str) -> crate::Result<crate::config::ArchConfig> {
        crate::models::parse_fields(
            r#""model_type": "jetmoe", "hidden_size": 64, "intermediate_size": 128,
            "num_hidden_layers": 2, "vocab_size": 300, "max_position_embeddings": 128"#,
            extra,
        )
    }

    #[test]
    fn heads_come_from_the_kv_heads_and_the_picked_experts() {
        let cfg =
            parse(r#", "num_key_value_heads": 2, "kv_channels": 16, "num_attention_heads": 7"#)
                .unwrap();
        assert_eq!(cfg.num_attention_heads, 4);
        assert_eq!((cfg.num_key_value_heads, cfg.head_dim), (2, 16));
        assert_eq!(
            *cfg.knobs::<JetMoe>().unwrap(),
            JetMoe {
                experts: 8,
                top_k: 2
            }
        );
        let defaults = parse("").unwrap();
        assert_eq!((defaults.num_key_value_heads, defaults.head_dim), (16, 128));
        assert!(defaults.tie_word_embeddings);
        let err = parse(r#", "activation_function": "gelu""#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("activation_function"), "{err}");
    }
}
