//! Granite-MoE shared (IBM, transformers' GraniteMoeSharedForCausalLM): Granite-MoE
//! ([`GraniteMoe`]: Granite's multipliers, stacked SwiGLU experts) whose layers add a shared
//! SwiGLU expert every token passes through (`shared_mlp.input_linear` `[2·S, H]`, the gate
//! rows then the up rows, and `shared_mlp.output_linear` `[H, S]`, S the
//! `shared_intermediate_size`; 0 for none) to the routed experts' output.

use super::components::{linear, DecoderInputs};
use super::decoder::Family;
use super::family::FamilySpec;
use super::granitemoe::{self, GraniteMoe};
use crate::config::{ArchConfig, Fields, HfConfig, Knobs, ModelType};
use crate::ir::{Attr, DType, GraphBuilder};
use crate::limits::config::MAX_WIDTH;
use crate::Result;

/// The family's registry entry (onnxruntime-genai's `granite` type: the same I/O).
pub static FAMILY: FamilySpec = FamilySpec {
    name: "granitemoeshared",
    summary: "Granite-MoE with a shared SwiGLU expert beside the routed ones \
              (`shared_intermediate_size`)",
    model_types: &[ModelType::generative("granitemoeshared", "granite", read)],
};

/// transformers' GraniteMoeSharedConfig: GraniteMoeConfig's fields and defaults, and
/// `shared_intermediate_size` (default 0).
fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    let mut cfg = granitemoe::read(raw, t, f)?;
    if let Some(&moe) = cfg.knobs::<GraniteMoe>() {
        cfg.family = Knobs::new(GraniteMoeShared {
            moe,
            shared: shared_width(raw, f)?,
        });
    }
    Ok(cfg)
}

/// `shared_intermediate_size` (0 when absent: no shared expert).
pub(super) fn shared_width(raw: &HfConfig, f: &Fields<'_>) -> Result<usize> {
    match raw.shared_intermediate_size {
        None | Some(0) => Ok(0),
        width => f.positive("shared_intermediate_size", width, MAX_WIDTH),
    }
}

/// The shared expert of layer module `layer`, width `width`, on `x`:
/// `output_linear(silu(g) · u)` with `[g, u] = input_linear(x)`.
pub(super) fn shared_expert(
    b: &mut GraphBuilder,
    cfg: &ArchConfig,
    x: &str,
    layer: &str,
    width: usize,
    dtype: DType,
) -> String {
    let (h, prefix) = (cfg.hidden_size, format!("{layer}.shared_mlp"));
    let gate_up = linear(
        b,
        x,
        &format!("{prefix}.input_linear"),
        h,
        2 * width,
        false,
        dtype,
    );
    let halves = [b.fresh_name("Split"), b.fresh_name("Split")];
    let num_outputs = vec![("axis", Attr::Int(-1)), ("num_outputs", Attr::Int(2))];
    b.node("", "Split", &[&gate_up], num_outputs, halves.to_vec());
    let [gate, up] = halves;
    let sig = b.op("Sigmoid", &[&gate], vec![]);
    let gate = b.op("Mul", &[&gate, &sig], vec![]);
    let prod = b.op("Mul", &[&gate, &up], vec![]);
    linear(
        b,
        &prod,
        &format!("{prefix}.output_linear"),
        width,
        h,
        false,
        dtype,
    )
}

/// Granite-MoE shared's knobs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GraniteMoeShared {
    /// Granite-MoE's multipliers and routing.
    pub moe: GraniteMoe,
    /// `shared_intermediate_size` (0: no shared expert).
    pub shared: usize,
}

impl Family for GraniteMoeShared {
    fn embed(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        io: &DecoderInputs,
        x: String,
        dtype: DType,
    ) -> String {
        self.moe.embed(b, cfg, io, x, dtype)
    }

    fn attention_scale(&self, cfg: &ArchConfig) -> f32 {
        self.moe.attention_scale(cfg)
    }

    fn residual_branch(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        y: String,
        dtype: DType,
    ) -> String {
        self.moe.residual_branch(b, cfg, y, dtype)
    }

    fn logits(&self, b: &mut GraphBuilder, cfg: &ArchConfig, x: &str, head: &str, dtype: DType) {
        self.moe.logits(b, cfg, x, head, dtype)
    }

    /// The routed experts plus, when there is one, the shared expert.
    fn layer_mlp(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        layer: &str,
        i: usize,
        dtype: DType,
    ) -> String {
        let routed = self.moe.layer_mlp(b, cfg, x, layer, i, dtype);
        if self.shared == 0 {
            return routed;
        }
        let shared = shared_expert(b, cfg, x, layer, self.shared, dtype);
        b.op("Add", &[&routed, &shared], vec![])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &str) -> crate::Result<ArchConfig> {
        crate::models::tiny_config("granitemoeshared", extra)
    }

    #[test]
    fn reads_the_shared_width() {
        let none = *parse("").unwrap().knobs::<GraniteMoeShared>().unwrap();
        assert_eq!((none.shared, none.moe.experts, none.moe.top_k), (0, 8, 2));
        let cfg = parse(r#", "shared_intermediate_size": 32, "num_local_experts": 4"#).unwrap();
        let k = *cfg.knobs::<GraniteMoeShared>().unwrap();
        assert_eq!((k.shared, k.moe.experts), (32, 4));
        let err = parse(r#", "shared_intermediate_size": -1"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("shared_intermediate_size"), "{err}");
    }
}
