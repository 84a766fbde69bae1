//! Aria's text decoder (`aria_text`, transformers' AriaTextForCausalLM): the Llama decoder
//! whose every MLP is a mixture of SwiGLU experts: the router (`mlp.router.weight`) keeps the
//! top `moe_topk` logits, weighted by their softmax (the softmax over every expert,
//! renormalised), the experts stored `[in, out]` as Aria's checkpoints name them
//! (`mlp.experts.fc1.weight` `[E, H, 2·I]`: gate then up columns; `fc2.weight` `[E, I, H]`),
//! plus `moe_num_shared_experts` experts' worth of shared SwiGLU (`mlp.shared_experts`, biased
//! with `mlp_bias`).

use super::components::{gated_mlp, ExpertWeights, GateActivation, MoeSpec, Router};
use super::decoder::Family;
use super::family::FamilySpec;
use crate::config::ModelType;
use crate::config::{read_decoder, ArchConfig, DecoderFields, Fields, HfConfig};
use crate::ir::{DType, GraphBuilder};
use crate::limits::config::MAX_EXPERTS;
use crate::Result;

/// The family's registry entry.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "aria_text",
    summary: "Llama with SwiGLU experts in every layer stored `[in, out]` (`fc1`, `fc2`), \
              top-k logits → softmax routing, shared experts with MLP biases",
    model_types: &[ModelType::generative("aria_text", "decoder", read)],
};

/// The experts as Aria's checkpoints store them.
const EXPERTS: ExpertWeights = ExpertWeights::StackedInOut {
    router: "router",
    gate_up: "experts.fc1.weight",
    down: "experts.fc2.weight",
};

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    read_decoder(raw, t, f, &DecoderFields::LLAMA, |_| {
        let experts = match raw.moe_num_experts {
            Some(n) => f.count("moe_num_experts", n, MAX_EXPERTS)?,
            None => 8,
        };
        let top_k = match f.json_integer("moe_topk", raw.moe_topk.as_ref())? {
            None => 2,
            Some(k) => f.count("moe_topk", k, MAX_EXPERTS)?,
        };
        if top_k > experts {
            return Err(f.err(
                "moe_topk",
                &format!("{top_k} is more than the {experts} experts of a layer"),
            ));
        }
        let shared = match raw.moe_num_shared_experts {
            Some(n) => f.index("moe_num_shared_experts", n, MAX_EXPERTS)?,
            None => 2,
        };
        Ok(AriaText {
            routing: (experts, top_k),
            shared_experts: shared,
        })
    })
}

/// Aria's knobs and hooks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AriaText {
    /// `(moe_num_experts, moe_topk)`.
    pub routing: (usize, usize),
    /// `moe_num_shared_experts`: the shared experts' width in `intermediate_size`s.
    pub shared_experts: usize,
}

impl Family for AriaText {
    fn layer_mlp(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        layer: &str,
        _i: usize,
        dtype: DType,
    ) -> String {
        let mlp = format!("{layer}.mlp");
        let router = Router::Softmax { normalize: true };
        let width = cfg.intermediate_size;
        let routed =
            MoeSpec::new(cfg, width, self.routing, router, EXPERTS).build(b, x, &mlp, dtype);
        if self.shared_experts == 0 {
            return routed;
        }
        let shared = format!("{mlp}.shared_experts");
        let sizes = (cfg.hidden_size, width * self.shared_experts);
        let act = GateActivation::Silu;
        let shared = gated_mlp(b, x, &shared, sizes, cfg.mlp_bias, act, dtype);
        b.op("Add", &[&routed, &shared], vec![])
    }
}

#[cfg(test)]
mod tests {
    use super::AriaText;

    #[test]
    fn routing_defaults_and_checks() {
        let c = crate::models::tiny_config("aria_text", "").unwrap();
        let k = c.knobs::<AriaText>().unwrap();
        assert_eq!((k.routing, k.shared_experts), ((8, 2), 2));
        let c = crate::models::tiny_config(
            "aria_text",
            r#", "moe_num_experts": 4, "moe_topk": 1, "moe_num_shared_experts": 0"#,
        )
        .unwrap();
        let k = c.knobs::<AriaText>().unwrap();
        assert_eq!((k.routing, k.shared_experts), ((4, 1), 0));
        for extra in [r#", "moe_topk": 9"#, r#", "moe_topk": [1, 2]"#] {
            let err = crate::models::tiny_config("aria_text", extra)
                .unwrap_err()
                .to_string();
            assert!(err.contains("moe_topk"), "{err}");
        }
    }
}
