//! Cohere 2 MoE (transformers' Cohere2MoeForCausalLM): Cohere 2's parallel blocks, logit
//! scale and hybrid attention (sliding layers rotate with interleaved RoPE, full layers use no
//! position embedding), heads `head_dim` wide (128 by default), one norm per layer (Cohere's
//! LayerNorm without bias, or RMSNorm when `rms_norm_eps` is set), and a mixture of experts:
//! the leading `first_k_dense_replace` layers (or those `mlp_layer_types` names `dense`) keep
//! a dense SwiGLU MLP of `prefix_dense_intermediate_size` (default `intermediate_size`), slide
//! by `prefix_dense_sliding_window_pattern` (1: none slides, and all of them rotate); the
//! others route each token to `num_experts_per_tok` of `num_experts` SwiGLU experts of
//! `intermediate_size` (router `mlp.gate`, experts `mlp.experts.{e}.*_proj`), weighted by the
//! softmax of their logits (or, with `expert_selection_fn: sigmoid`, their sigmoids,
//! renormalised by `norm_topk_prob`), plus `num_shared_experts` experts' worth of shared
//! SwiGLU MLP (`mlp.shared_experts`) summed or averaged in
//! (`shared_expert_combination_strategy`).

use super::cohere::{read_cohere, Cohere, FIELDS as COHERE};
use super::components::{
    gated_mlp, scalar, ExpertWeights, GateActivation, GroupScore, GroupedRouter, MoeSpec, Norm,
    NormKind, Router,
};
use super::decoder::{Family, LayerNorms, LayerRope};
use super::family::FamilySpec;
use super::glm4_moe::mlp_layer_types;
use crate::config::{
    sliding_layer_types, ArchConfig, DecoderFields, Fields, HfConfig, ModelType, Sign,
    SlidingLayers,
};
use crate::ir::{DType, GraphBuilder};
use crate::limits::config::{MAX_EXPERTS, MAX_LAYERS, MAX_WIDTH};
use crate::Result;

/// The family's registry entry. onnxruntime-genai 0.18 has no `cohere2_moe` type: its generic
/// `decoder` runs the graph.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "cohere2_moe",
    summary: "Cohere 2 with experts after dense prefix layers: top-k softmax (or sigmoid) \
              router, shared experts summed or averaged in",
    model_types: &[ModelType::generative("cohere2_moe", "decoder", read)],
};

/// transformers' Cohere2MoeConfig: Cohere's reading with heads of 128 and a window of 4096.
const FIELDS: DecoderFields = DecoderFields {
    head_dim: Some(128),
    sliding_window: Some(4096),
    sliding_layers: SlidingLayers::Pattern(pattern_layers),
    ..COHERE
};

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    // Cohere2MoeConfig has no MLP bias, q/k norm, `use_sliding_window` or `max_window_layers`:
    // transformers ignores them.
    let raw = HfConfig {
        mlp_bias: None,
        use_qk_norm: None,
        use_sliding_window: None,
        max_window_layers: None,
        ..raw.clone()
    };
    read_cohere(&raw, t, f, &FIELDS, |cohere, dims| {
        let layers = dims.num_hidden_layers;
        let sliding = match sliding_layer_types(&raw, layers, f)? {
            Some(types) => types,
            None => pattern_layers(&raw, layers, f)?,
        };
        if raw.sliding_window == Some(None) && sliding.contains(&true) {
            return Err(f.err(
                "sliding_window",
                "null, but some layers are sliding_attention layers (transformers needs a \
                 window for them)",
            ));
        }
        let first_dense = first_dense(&raw, f)?;
        let moe_layers = match &raw.mlp_layer_types {
            Some(types) => mlp_layer_types(types, layers, f)?,
            None => (0..layers).map(|i| i >= first_dense).collect(),
        };
        let force_rope = prefix_pattern(&raw, f)? == 1;
        let rope_layers = (sliding.iter().zip(&moe_layers))
            .map(|(&s, &moe)| s || (!moe && force_rope))
            .collect();
        let norm = match raw.rms_norm_eps {
            Some(eps) => Norm {
                kind: NormKind::Rms,
                eps: f.number("rms_norm_eps", Some(eps), eps, Sign::NonNegative)?,
            },
            None => Norm {
                kind: NormKind::UnbiasedLayer,
                eps: cohere.layer_norm_eps,
            },
        };
        Ok(Cohere2Moe {
            cohere,
            norm,
            rope_layers,
            moe_layers,
            dense_width: match raw.prefix_dense_intermediate_size.flatten() {
                Some(w) => Some(f.count("prefix_dense_intermediate_size", w, MAX_WIDTH)?),
                None => None,
            },
            moe: experts(&raw, f)?,
        })
    })
}

/// `first_k_dense_replace` (0 by default: Cohere2MoeConfig takes it only to derive the layer
/// types).
fn first_dense(raw: &HfConfig, f: &Fields<'_>) -> Result<usize> {
    match raw.first_k_dense_replace {
        Some(n) => f.index("first_k_dense_replace", n, MAX_LAYERS),
        None => Ok(0),
    }
}

/// `prefix_dense_sliding_window_pattern` (default 1).
fn prefix_pattern(raw: &HfConfig, f: &Fields<'_>) -> Result<usize> {
    let field = "prefix_dense_sliding_window_pattern";
    f.optional_count(
        field,
        raw.prefix_dense_sliding_window_pattern,
        1,
        MAX_LAYERS,
    )
}

/// The sliding layers without `layer_types`, as Cohere2MoeConfig derives them: of the
/// `first_k_dense_replace` leading layers all but every
/// `prefix_dense_sliding_window_pattern`-th, of the others all but every
/// `sliding_window_pattern`-th (default 4), counted from the first of them.
fn pattern_layers(raw: &HfConfig, layers: usize, f: &Fields<'_>) -> Result<Vec<bool>> {
    let field = "sliding_window_pattern";
    let every = f.json_integer(field, raw.sliding_window_pattern.as_ref())?;
    let every = f.optional_count(field, every, 4, MAX_LAYERS)?;
    let (prefix, prefix_every) = (first_dense(raw, f)?.min(layers), prefix_pattern(raw, f)?);
    let leading = (0..prefix).map(|i| (i + 1) % prefix_every != 0);
    Ok(leading
        .chain((0..layers - prefix).map(|i| (i + 1) % every != 0))
        .collect())
}

/// The experts' fields, checked as transformers' router needs them.
fn experts(raw: &HfConfig, f: &Fields<'_>) -> Result<Cohere2Experts> {
    let experts = f.optional_count("num_experts", raw.num_experts, 8, MAX_EXPERTS)?;
    let k_field = "num_experts_per_tok";
    let top_k = f.optional_count(k_field, raw.num_experts_per_tok, 2, MAX_EXPERTS)?;
    if top_k > experts {
        return Err(f.err(
            k_field,
            &format!("{top_k} is more than the {experts} experts of a layer"),
        ));
    }
    let router = match raw.expert_selection_fn.as_deref().unwrap_or("softmax") {
        // The softmax of the top-k logits: the top-k softmax probabilities, renormalised.
        "softmax" => Router::Softmax { normalize: true },
        // The sigmoids of the top-k logits, divided by their sum with `norm_topk_prob`.
        "sigmoid" => Router::Grouped(GroupedRouter {
            sigmoid: true,
            correction_bias: false,
            groups: 1,
            top_groups: 1,
            group_score: GroupScore::TopTwoSum,
            normalize: raw.norm_topk_prob.unwrap_or(true),
            scale: 1.0,
        }),
        other => {
            return Err(f.err(
                "expert_selection_fn",
                &format!("`{other}` (expected softmax or sigmoid)"),
            ))
        }
    };
    let shared = match raw.num_shared_experts {
        Some(n) => f.index("num_shared_experts", n, MAX_EXPERTS)?,
        None => 0,
    };
    let field = "shared_expert_combination_strategy";
    let average = match raw.shared_expert_combination_strategy.as_deref() {
        None | Some("average") => true,
        Some("sum") => false,
        Some(other) => {
            return Err(f.err(field, &format!("`{other}` (expected sum or average)")));
        }
    };
    Ok(Cohere2Experts {
        experts,
        top_k,
        router,
        shared,
        average,
    })
}

/// Cohere 2 MoE's experts and router.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cohere2Experts {
    /// `num_experts`.
    pub experts: usize,
    /// `num_experts_per_tok`.
    pub top_k: usize,
    /// The top-k softmax (or sigmoid) router.
    pub router: Router,
    /// `num_shared_experts`: the shared MLP is this many experts wide (0: none).
    pub shared: usize,
    /// Whether the shared MLP's output is averaged with the routed experts' (else summed).
    pub average: bool,
}

/// Cohere 2 MoE's knobs.
#[derive(Debug, Clone, PartialEq)]
pub struct Cohere2Moe {
    /// Cohere's knobs (LayerNorm epsilon, logit scale).
    pub cohere: Cohere,
    /// Every norm: Cohere's LayerNorm, or RMSNorm with `rms_norm_eps`.
    pub norm: Norm,
    /// Per layer, whether it applies RoPE (the sliding layers, and the dense prefix layers
    /// with `prefix_dense_sliding_window_pattern` 1).
    pub rope_layers: Vec<bool>,
    /// Per layer, whether its MLP is a MoE block (the others are dense).
    pub moe_layers: Vec<bool>,
    /// The dense layers' MLP width (`prefix_dense_intermediate_size`; `None`:
    /// `intermediate_size`).
    pub dense_width: Option<usize>,
    /// The experts and their router.
    pub moe: Cohere2Experts,
}

impl Family for Cohere2Moe {
    fn norm(&self, _cfg: &ArchConfig) -> Norm {
        self.norm
    }

    fn layer_norms(&self) -> LayerNorms {
        self.cohere.layer_norms()
    }

    fn parallel_blocks(&self) -> bool {
        true
    }

    fn layer_rope_kind(&self, _cfg: &ArchConfig, i: usize) -> LayerRope {
        LayerRope::config_if(self.rope_layers[i])
    }

    /// The dense MLP, or the routed experts plus (or averaged with) the shared experts.
    fn layer_mlp(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        layer: &str,
        i: usize,
        dtype: DType,
    ) -> String {
        let (mlp, act) = (format!("{layer}.mlp"), GateActivation::Silu);
        if !self.moe_layers[i] {
            let width = self.dense_width.unwrap_or(cfg.intermediate_size);
            let sizes = (cfg.hidden_size, width);
            return gated_mlp(b, x, &mlp, sizes, false, act, dtype);
        }
        let e = &self.moe;
        let width = cfg.intermediate_size;
        let spec = MoeSpec::new(
            cfg,
            width,
            (e.experts, e.top_k),
            e.router,
            ExpertWeights::PROJ,
        );
        let routed = spec.build(b, x, &mlp, dtype);
        if e.shared == 0 {
            return routed;
        }
        let sizes = (cfg.hidden_size, e.shared * width);
        let shared = format!("{mlp}.shared_experts");
        let shared = gated_mlp(b, x, &shared, sizes, false, act, dtype);
        let sum = b.op("Add", &[&routed, &shared], vec![]);
        if !e.average {
            return sum;
        }
        let half = scalar(b, 0.5, dtype);
        b.op("Mul", &[&sum, &half], vec![])
    }

    fn logits(&self, b: &mut GraphBuilder, cfg: &ArchConfig, x: &str, head: &str, dtype: DType) {
        self.cohere.logits(b, cfg, x, head, dtype)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &str) -> crate::Result<ArchConfig> {
        crate::models::parse_fields(
            r#""model_type": "cohere2_moe", "hidden_size": 64, "intermediate_size": 32,
            "num_attention_heads": 4, "num_hidden_layers": 5, "vocab_size": 300,
            "max_position_embeddings": 8192"#,
            extra,
        )
    }

    fn knobs(cfg: &ArchConfig) -> &Cohere2Moe {
        cfg.knobs::<Cohere2Moe>().unwrap()
    }

    #[test]
    fn reads_transformers_defaults() {
        let cfg = parse(r#", "mlp_bias": true, "use_qk_norm": true"#).unwrap();
        let w = Some(4096);
        assert_eq!(cfg.layer_windows, [w, w, w, None, w]);
        assert_eq!((cfg.head_dim, cfg.rope.rotary_dim), (128, 128));
        assert!(cfg.rope.interleaved && cfg.tie_word_embeddings && !cfg.mlp_bias);
        let k = knobs(&cfg);
        assert_eq!(k.rope_layers, [true, true, true, false, true]);
        assert_eq!(k.moe_layers, [true; 5]);
        assert_eq!(k.norm.kind, NormKind::UnbiasedLayer);
        let e = k.moe;
        assert_eq!((e.experts, e.top_k, e.shared, e.average), (8, 2, 0, true));
        assert_eq!(e.router, Router::Softmax { normalize: true });
        assert_eq!(k.dense_width, None);
    }

    #[test]
    fn dense_prefix_layers() {
        // Two dense layers, which do not slide and rotate; the pattern restarts after them.
        let cfg = parse(
            r#", "first_k_dense_replace": 2, "sliding_window_pattern": 2,
            "prefix_dense_intermediate_size": 96, "rms_norm_eps": 1e-6,
            "expert_selection_fn": "sigmoid", "norm_topk_prob": false,
            "num_shared_experts": 2, "shared_expert_combination_strategy": "sum""#,
        )
        .unwrap();
        let k = knobs(&cfg);
        assert_eq!(k.moe_layers, [false, false, true, true, true]);
        assert_eq!(
            cfg.layer_windows,
            [None, None, Some(4096), None, Some(4096)]
        );
        assert_eq!(k.rope_layers, [true, true, true, false, true]);
        assert_eq!((k.dense_width, k.norm.kind), (Some(96), NormKind::Rms));
        assert!(!k.moe.average && k.moe.shared == 2);
        match k.moe.router {
            Router::Grouped(g) => assert!(g.sigmoid && !g.normalize && !g.correction_bias),
            other => panic!("{other:?}"),
        }
        // A prefix pattern of 2 slides the first dense layer, and no dense layer rotates
        // unless it slides.
        let cfg =
            parse(r#", "first_k_dense_replace": 2, "prefix_dense_sliding_window_pattern": 2"#)
                .unwrap();
        assert_eq!(knobs(&cfg).rope_layers, [true, false, true, true, true]);
    }

    #[test]
    fn bad_fields_are_named() {
        for (extra, want) in [
            (r#", "expert_selection_fn": "relu""#, "expert_selection_fn"),
            (
                r#", "shared_expert_combination_strategy": "max""#,
                "shared_expert_combination_strategy",
            ),
            (r#", "num_experts_per_tok": 9"#, "num_experts_per_tok"),
            (r#", "mlp_layer_types": ["dense"]"#, "mlp_layer_types"),
            (
                r#", "prefix_dense_sliding_window_pattern": 0"#,
                "prefix_dense",
            ),
        ] {
            let err = parse(extra).unwrap_err().to_string();
            assert!(err.contains(want), "{extra}: {err}");
        }
    }
}
