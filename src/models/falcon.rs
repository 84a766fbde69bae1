//! Falcon (TII): LayerNorm with bias, one fused `query_key_value` projection in one of three
//! row layouts, RoPE or ALiBi, a GELU MLP (`ffn_hidden_size`, 4·hidden by default), biases on
//! every projection when `bias` is set, and the LM head tied to the embeddings.
//!
//! As transformers reads a Falcon config:
//! - `new_decoder_architecture` (Falcon-40B/180B): `num_kv_heads` key/value heads, the fused
//!   rows grouped by key/value head (`[kv_heads, group + 2, head_dim]`: the group's query heads,
//!   then its key, then its value), parallel blocks `x + attn(ln_attn(x)) + mlp(ln_mlp(x))`
//!   (`num_ln_in_parallel_attn` 2, the default) or with one `input_layernorm` for both (1);
//! - otherwise `multi_query` (Falcon-7B: all query heads, then one key and one value head) or
//!   multi-head attention with the rows grouped by head (`[heads, 3, head_dim]`), and blocks
//!   parallel on one `input_layernorm` (`parallel_attn`) or sequential with
//!   `post_attention_layernorm`.
//!
//! `alibi` replaces RoPE by the ALiBi bias ([`crate::models::components::alibi`], BLOOM's
//! slopes, scaled by `head_dim^-0.5` as the scores are). transformers computes that bias in
//! bfloat16, which rounds key positions beyond 256; mobius computes it in f32, so the two agree
//! up to 256 tokens and drift apart slowly beyond.

use super::components::{alibi_slopes, ungated_mlp, Activation, Norm, NormKind};
use super::decoder::{Family, LayerNorms, Names};
use super::family::FamilySpec;
use crate::config::{
    first_token, parse_dtype, read_rope, token_list, ArchConfig, CheckpointRenaming, Fields, Gelu,
    HfConfig, Knobs, ModelType, Sign,
};
use crate::ir::{DType, GraphBuilder, Initializer, TensorSource};
use crate::limits::config::{MAX_HEADS, MAX_LAYERS, MAX_POSITIONS, MAX_VOCAB, MAX_WIDTH};
use crate::Result;

/// The family's registry entry. onnxruntime-genai 0.18 has no `falcon` type: its generic
/// `decoder` runs the graph.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "falcon",
    summary: "fused `query_key_value` in the new (grouped by kv head), multi-query or \
              per-head layout (split at save time), parallel or sequential blocks with \
              LayerNorm, RoPE or ALiBi (`alibi`), GELU MLP, optional biases, tied head",
    model_types: &[ModelType::generative("falcon", "decoder", read)],
};

/// How the fused `query_key_value` rows are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QkvLayout {
    /// `[kv_heads, group + 2, head_dim]` (`new_decoder_architecture`).
    Grouped,
    /// `[heads + 2, head_dim]`: every query head, one key, one value (`multi_query`).
    MultiQuery,
    /// `[heads, 3, head_dim]`: each head's q, k and v rows together.
    PerHead,
}

/// How a layer's blocks and norms are arranged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blocks {
    /// `x + attn(ln_attn(x)) + mlp(ln_mlp(x))`.
    ParallelTwoNorms,
    /// `x + attn(ln(x)) + mlp(ln(x))` with `input_layernorm`.
    ParallelOneNorm,
    /// `h = x + attn(input_layernorm(x))`, `h + mlp(post_attention_layernorm(h))`.
    Sequential,
}

/// Falcon's knobs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Falcon {
    /// Epsilon of every LayerNorm (`layer_norm_epsilon`, 1e-5).
    pub layer_norm_eps: f32,
    /// The MLP activation (`activation`, `gelu`).
    pub gelu: Gelu,
    /// The fused projection's row layout.
    pub layout: QkvLayout,
    /// The layer's block arrangement.
    pub blocks: Blocks,
    /// ALiBi instead of RoPE (`alibi`).
    pub alibi: bool,
}

/// Reads a Falcon config as transformers' FalconConfig does (defaults: `hidden_size` 4544, 32
/// layers, 71 heads, `vocab_size` 65024, `multi_query` and `parallel_attn` true, `bias` and
/// `alibi` false, tied); errors name the field and what was expected.
fn read(raw: &HfConfig, model_type: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    let (hidden_field, hidden) = match raw.n_embed {
        Some(n) => ("n_embed", n),
        None => ("hidden_size", raw.hidden_size.unwrap_or(4544)),
    };
    let hidden_size = f.positive(hidden_field, Some(hidden), MAX_WIDTH)?;
    let heads = f.positive(
        "num_attention_heads",
        raw.num_attention_heads.or(Some(71)),
        MAX_HEADS,
    )?;
    if hidden_size % heads != 0 {
        return Err(f.err(
            "num_attention_heads",
            &format!("{heads} does not divide the hidden size ({hidden_size})"),
        ));
    }
    let layers = f.positive(
        "num_hidden_layers",
        raw.num_hidden_layers.or(Some(32)),
        MAX_LAYERS,
    )?;
    let new_arch = raw.new_decoder_architecture.unwrap_or(false);
    let multi_query = raw.multi_query.unwrap_or(true);
    let parallel = raw.parallel_attn.unwrap_or(true);
    // transformers reads num_kv_heads only with new_decoder_architecture or without multi_query.
    let kv_heads = || {
        f.positive(
            "num_kv_heads",
            raw.num_kv_heads.or(Some(heads as i64)),
            heads,
        )
    };
    let (layout, kv_heads) = if new_arch {
        let kv_heads = kv_heads()?;
        if heads % kv_heads != 0 {
            return Err(f.err(
                "num_kv_heads",
                &format!("{kv_heads} does not divide num_attention_heads ({heads})"),
            ));
        }
        (QkvLayout::Grouped, kv_heads)
    } else if multi_query {
        (QkvLayout::MultiQuery, 1)
    } else if kv_heads()? != heads {
        // transformers' per-head layout has a key and value for every head.
        return Err(f.err(
            "num_kv_heads",
            &format!(
                "{} (expected num_attention_heads, {heads}, without multi_query or \
                 new_decoder_architecture)",
                kv_heads()?
            ),
        ));
    } else {
        (QkvLayout::PerHead, heads)
    };
    let norms_in_parallel = match raw.num_ln_in_parallel_attn {
        None => new_arch.then_some(2),
        Some(n @ (1 | 2)) => Some(n),
        Some(n) => return Err(f.err("num_ln_in_parallel_attn", &format!("{n} (expected 1 or 2)"))),
    };
    // The arrangements transformers' FalconDecoderLayer runs (it builds the norms of one and,
    // for the others, reads norms it never built).
    let blocks = match (new_arch, parallel, norms_in_parallel) {
        (true, true, Some(2)) => Blocks::ParallelTwoNorms,
        (true, true, _) | (false, true, None | Some(1)) => Blocks::ParallelOneNorm,
        (false, false, _) => Blocks::Sequential,
        _ => {
            return Err(f.err(
                "parallel_attn",
                &format!(
                    "{parallel} with new_decoder_architecture {new_arch} and \
                     num_ln_in_parallel_attn {norms_in_parallel:?} (transformers runs no such \
                     layer: expected parallel_attn true with the new architecture, and \
                     num_ln_in_parallel_attn 1 or none with parallel_attn without it)"
                ),
            ))
        }
    };
    let act = raw.activation.as_deref().unwrap_or("gelu");
    let gelu = Gelu::from_hf_name(act).ok_or_else(|| {
        f.err(
            "activation",
            &format!(
                "`{act}` is not supported for falcon (expected {})",
                Gelu::NAMES
            ),
        )
    })?;
    let head_dim = hidden_size / heads;
    let bias = raw.bias.unwrap_or(false);
    Ok(ArchConfig {
        model_type,
        hidden_size,
        intermediate_size: match raw.ffn_hidden_size {
            None => 4 * hidden_size,
            some => f.positive("ffn_hidden_size", some, MAX_WIDTH)?,
        },
        num_attention_heads: heads,
        num_key_value_heads: kv_heads,
        head_dim,
        num_hidden_layers: layers,
        vocab_size: f.positive("vocab_size", raw.vocab_size.or(Some(65_024)), MAX_VOCAB)?,
        max_position_embeddings: f.positive(
            "max_position_embeddings",
            raw.max_position_embeddings.or(Some(2048)),
            MAX_POSITIONS,
        )?,
        rms_norm_eps: 0.0,
        tie_word_embeddings: raw.tie_word_embeddings.unwrap_or(true),
        qkv_bias: bias,
        o_bias: bias,
        mlp_bias: bias,
        rope: read_rope(raw, head_dim, 10_000.0, f)?,
        layer_windows: vec![None; layers],
        dtype: parse_dtype(raw, f)?,
        bos_token_id: first_token(f, "bos_token_id", raw.bos_token_id.as_ref())?,
        eos_token_ids: token_list(f, "eos_token_id", raw.eos_token_id.as_ref())?,
        pad_token_id: first_token(f, "pad_token_id", raw.pad_token_id.as_ref())?,
        family: Knobs::new(Falcon {
            layer_norm_eps: f.number(
                "layer_norm_epsilon",
                raw.layer_norm_epsilon,
                1e-5,
                Sign::NonNegative,
            )?,
            gelu,
            layout,
            blocks,
            alibi: raw.alibi.unwrap_or(false),
        }),
    })
}

impl Falcon {
    /// The fused rows of q, k and v (`[start, len)` row ranges, in order) for `cfg`'s heads.
    fn rows(&self, cfg: &ArchConfig) -> [Vec<(usize, usize)>; 3] {
        let (hq, hkv, d) = (
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
            cfg.head_dim,
        );
        match self.layout {
            QkvLayout::Grouped => {
                let g = hq / hkv;
                let block = |kv: usize, i: usize| ((kv * (g + 2) + i) * d, d);
                [
                    (0..hkv)
                        .flat_map(|kv| (0..g).map(move |j| block(kv, j)))
                        .collect(),
                    (0..hkv).map(|kv| block(kv, g)).collect(),
                    (0..hkv).map(|kv| block(kv, g + 1)).collect(),
                ]
            }
            QkvLayout::MultiQuery => [
                vec![(0, hq * d)],
                vec![(hq * d, d)],
                vec![((hq + 1) * d, d)],
            ],
            QkvLayout::PerHead => {
                [0, 1, 2].map(|part| (0..hq).map(|head| ((3 * head + part) * d, d)).collect())
            }
        }
    }
}

/// The rows `ranges` of checkpoint tensor `name` (`total` rows), concatenated.
fn gathered(name: &str, ranges: &[(usize, usize)], total: usize) -> TensorSource {
    let slice = |&(start, len): &(usize, usize)| TensorSource::Slice {
        source: Box::new(TensorSource::Checkpoint(name.to_string())),
        axis: 0,
        start,
        len,
        total,
    };
    match ranges {
        [one] => slice(one),
        _ => TensorSource::Concat {
            parts: ranges.iter().map(slice).collect(),
            axis: 0,
        },
    }
}

/// Falcon's hooks.
impl Family for Falcon {
    fn checkpoint_renaming(&self) -> Option<CheckpointRenaming> {
        // Base-model checkpoints spell `h.0.…`, `word_embeddings.weight`.
        Some(super::gpt2::checkpoint_name)
    }

    fn names(&self) -> Names {
        Names {
            root: "transformer",
            embed: "word_embeddings",
            layers: "h",
            attn: "self_attention",
            o_proj: "dense",
            final_norm: "ln_f",
        }
    }

    fn norm(&self, _cfg: &ArchConfig) -> Norm {
        Norm {
            kind: NormKind::Layer,
            eps: self.layer_norm_eps,
        }
    }

    fn layer_norms(&self) -> LayerNorms {
        let (pre_attention, pre_mlp) = match self.blocks {
            Blocks::ParallelTwoNorms => ("ln_attn", Some("ln_mlp")),
            Blocks::ParallelOneNorm => ("input_layernorm", None),
            Blocks::Sequential => ("input_layernorm", Some("post_attention_layernorm")),
        };
        LayerNorms {
            pre_attention: Some(pre_attention),
            post_attention: None,
            pre_mlp,
            post_mlp: None,
        }
    }

    fn parallel_blocks(&self) -> bool {
        self.blocks != Blocks::Sequential
    }

    fn rotary_positions(&self, _cfg: &ArchConfig) -> bool {
        !self.alibi
    }

    /// BLOOM's slopes times the score scale (transformers divides the bias by √head_dim).
    fn alibi_slopes(&self, cfg: &ArchConfig) -> Option<Vec<f32>> {
        let scale = (cfg.head_dim as f64).powf(-0.5);
        self.alibi.then(|| {
            let slopes = alibi_slopes(cfg.num_attention_heads);
            slopes.iter().map(|&s| (s as f64 * scale) as f32).collect()
        })
    }

    /// q, k and v as three projections, their rows gathered from the fused
    /// `query_key_value` (in [`Falcon::layout`]) when the model is saved.
    fn qkv(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        attn: &str,
        dtype: DType,
    ) -> [String; 3] {
        let fused = format!("{attn}.query_key_value");
        let (h, d) = (cfg.hidden_size, cfg.head_dim);
        let total = (cfg.num_attention_heads + 2 * cfg.num_key_value_heads) * d;
        let total = match self.layout {
            QkvLayout::MultiQuery => (cfg.num_attention_heads + 2) * d,
            _ => total,
        };
        let rows = self.rows(cfg);
        let parts = ["q_proj", "k_proj", "v_proj"];
        let mut out = parts.iter().zip(&rows).map(|(name, ranges)| {
            let prefix = format!("{attn}.{name}");
            let width = ranges.iter().map(|r| r.1).sum::<usize>();
            let w = b.initializer(Initializer {
                name: format!("{prefix}.weight_t"),
                dtype,
                shape: vec![h, width],
                source: Some(TensorSource::Transpose(Box::new(gathered(
                    &format!("{fused}.weight"),
                    ranges,
                    total,
                )))),
            });
            let y = b.op("MatMul", &[x, &w], vec![]);
            if !cfg.qkv_bias {
                return y;
            }
            let bias = b.initializer(Initializer {
                name: format!("{prefix}.bias"),
                dtype,
                shape: vec![width],
                source: Some(gathered(&format!("{fused}.bias"), ranges, total)),
            });
            b.op("Add", &[&y, &bias], vec![])
        });
        [(); 3].map(|_| out.next().expect("three projections"))
    }

    /// `dense_4h_to_h(gelu(dense_h_to_4h(x)))`.
    fn mlp(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        mlp: &str,
        dtype: DType,
    ) -> String {
        let names = (mlp, "dense_h_to_4h", "dense_4h_to_h");
        ungated_mlp(b, cfg, x, names, Activation::Gelu(self.gelu), dtype)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &str) -> Result<ArchConfig> {
        let json = format!(
            r#"{{"model_type": "falcon", "vocab_size": 300, "hidden_size": 64,
            "num_attention_heads": 4, "num_hidden_layers": 2{extra}}}"#
        );
        crate::models::parse_config(json.as_bytes(), std::path::Path::new("config.json"))
    }

    #[test]
    fn reads_the_three_architectures() {
        let mq = parse("").unwrap();
        let knobs = *mq.knobs::<Falcon>().unwrap();
        assert_eq!(
            (knobs.layout, knobs.blocks),
            (QkvLayout::MultiQuery, Blocks::ParallelOneNorm)
        );
        assert_eq!((mq.num_key_value_heads, mq.intermediate_size), (1, 256));
        assert!(!mq.qkv_bias && mq.tie_word_embeddings && !knobs.alibi);
        assert_eq!(knobs.gelu, Gelu::Exact);
        let new = parse(r#", "new_decoder_architecture": true, "num_kv_heads": 2"#).unwrap();
        let knobs = *new.knobs::<Falcon>().unwrap();
        assert_eq!(
            (knobs.layout, knobs.blocks),
            (QkvLayout::Grouped, Blocks::ParallelTwoNorms)
        );
        assert_eq!(new.num_key_value_heads, 2);
        let rw =
            parse(r#", "multi_query": false, "parallel_attn": false, "alibi": true, "bias": true"#)
                .unwrap();
        let knobs = *rw.knobs::<Falcon>().unwrap();
        assert_eq!(
            (knobs.layout, knobs.blocks),
            (QkvLayout::PerHead, Blocks::Sequential)
        );
        assert!(knobs.alibi && rw.qkv_bias && rw.o_bias && rw.mlp_bias);
        assert_eq!(rw.num_key_value_heads, 4);
    }

    #[test]
    fn fused_rows_follow_each_layout() {
        let cfg = parse(r#", "new_decoder_architecture": true, "num_kv_heads": 2"#).unwrap();
        let knobs = *cfg.knobs::<Falcon>().unwrap();
        // d = 16, group 2: [q0 q1 k0 v0 | q2 q3 k1 v1].
        let [q, k, v] = knobs.rows(&cfg);
        assert_eq!(q, [(0, 16), (16, 16), (64, 16), (80, 16)]);
        assert_eq!(
            (k, v),
            (vec![(32, 16), (96, 16)], vec![(48, 16), (112, 16)])
        );
        let mq = parse("").unwrap();
        let [q, k, v] = mq.knobs::<Falcon>().unwrap().rows(&mq);
        assert_eq!((q, k, v), (vec![(0, 64)], vec![(64, 16)], vec![(80, 16)]));
        let mha = parse(r#", "multi_query": false"#).unwrap();
        let [_, k, _] = mha.knobs::<Falcon>().unwrap().rows(&mha);
        assert_eq!(k, [(16, 16), (64, 16), (112, 16), (160, 16)]);
    }

    #[test]
    fn multi_query_ignores_num_kv_heads_as_transformers_does() {
        // transformers' FalconConfig defaults num_kv_heads to the head count (71 in released
        // configs) and reads it only with new_decoder_architecture or without multi_query.
        let cfg = parse(r#", "num_kv_heads": 71"#).unwrap();
        assert_eq!(cfg.num_key_value_heads, 1);
    }

    #[test]
    fn bad_fields_are_named() {
        for (extra, want) in [
            (
                r#", "new_decoder_architecture": true, "num_kv_heads": 3"#,
                "num_kv_heads",
            ),
            (
                r#", "multi_query": false, "num_kv_heads": 2"#,
                "num_kv_heads",
            ),
            (
                r#", "new_decoder_architecture": true, "parallel_attn": false"#,
                "parallel_attn",
            ),
            (r#", "num_ln_in_parallel_attn": 2"#, "parallel_attn"),
            (
                r#", "num_ln_in_parallel_attn": 3"#,
                "num_ln_in_parallel_attn",
            ),
            (r#", "activation": "relu""#, "activation"),
            (r#", "layer_norm_epsilon": -1"#, "layer_norm_epsilon"),
        ] {
            let err = parse(extra).unwrap_err().to_string();
            assert!(err.contains(&format!("field `{want}`")), "{extra}: {err}");
        }
    }
}
