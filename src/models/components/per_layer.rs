//! Per-layer inputs (Gemma 4, Gemma 3n): a second embedding table holding one slice per layer,
//! mixed with a projection of the embeddings, and each layer's gate that brings its slice
//! into the residual stream.

use super::{gelu, linear, scalar, Norm};
use crate::config::Gelu;
use crate::ir::{Attr, DType, GraphBuilder, Initializer, TensorSource};

/// The name of the per-layer inputs `[B, S, layers, width]`.
pub const PER_LAYER_INPUTS: &str = "model.per_layer_inputs";

/// The per-layer inputs' shape and norm.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PerLayer {
    /// The hidden size.
    pub hidden: usize,
    /// The decoder's layers.
    pub layers: usize,
    /// `hidden_size_per_layer_input`: each layer's slice.
    pub width: usize,
    /// `vocab_size_per_layer_input`: the rows of `model.embed_tokens_per_layer`.
    pub vocab: usize,
    /// The norm of the projection (`model.per_layer_projection_norm`) and of each layer's
    /// gated input (`post_per_layer_input_norm`).
    pub norm: Norm,
}

impl PerLayer {
    /// The per-layer inputs from the scaled embeddings `x` and the token ids `ids` (rows of
    /// the per-layer table): `(norm(x @ Wᵀ / sqrt(H)) + E_pl[ids] · sqrt(P)) / sqrt(2)`,
    /// `[B, S, layers, P]`, named [`PER_LAYER_INPUTS`].
    pub fn inputs(&self, b: &mut GraphBuilder, ids: &str, x: &str, dtype: DType) {
        let (h, layers, p) = (self.hidden, self.layers, self.width);
        let split = b.const_i64(&[0, 0, layers as i64, p as i64]);
        let proj = "model.per_layer_model_projection";
        let projected = linear(b, x, proj, h, layers * p, false, dtype);
        let factor = scalar(b, (h as f64).powf(-0.5) as f32, dtype);
        let projected = b.op("Mul", &[&projected, &factor], vec![]);
        let projected = b.op("Reshape", &[&projected, &split], vec![]);
        let module = "model.per_layer_projection_norm";
        let projected = self.norm.apply(b, &projected, module, p, dtype);
        let table = b.initializer(Initializer {
            name: "model.embed_tokens_per_layer.weight".into(),
            dtype,
            shape: vec![self.vocab, layers * p],
            source: Some(TensorSource::Checkpoint(
                "model.embed_tokens_per_layer.weight".into(),
            )),
        });
        let rows = b.op("Gather", &[&table, ids], vec![("axis", Attr::Int(0))]);
        let factor = scalar(b, (p as f64).sqrt() as f32, dtype);
        let rows = b.op("Mul", &[&rows, &factor], vec![]);
        let rows = b.op("Reshape", &[&rows, &split], vec![]);
        let sum = b.op("Add", &[&projected, &rows], vec![]);
        let half = scalar(b, 0.5f64.sqrt() as f32, dtype);
        b.op_into("Mul", &[&sum, &half], vec![], PER_LAYER_INPUTS);
    }

    /// Layer `i`'s gated per-layer input from `x` (module `layer`): `norm(proj(act(gate(x)) ·
    /// per_layer_input_i))`, to be added to the stream.
    pub fn gated(
        &self,
        b: &mut GraphBuilder,
        x: &str,
        (layer, i): (&str, usize),
        act: Gelu,
        dtype: DType,
    ) -> String {
        let (h, p) = (self.hidden, self.width);
        let gate_module = format!("{layer}.per_layer_input_gate");
        let gate = linear(b, x, &gate_module, h, p, false, dtype);
        let gate = gelu(b, &gate, act);
        let index = b.scalar_i64(i as i64);
        let input = b.op(
            "Gather",
            &[PER_LAYER_INPUTS, &index],
            vec![("axis", Attr::Int(2))],
        );
        let gated = b.op("Mul", &[&gate, &input], vec![]);
        let proj_module = format!("{layer}.per_layer_projection");
        let projected = linear(b, &gated, &proj_module, p, h, false, dtype);
        let norm_module = format!("{layer}.post_per_layer_input_norm");
        self.norm.apply(b, &projected, &norm_module, h, dtype)
    }
}
