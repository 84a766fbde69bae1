//! The BERT-style transformer layer, shared by the encoders (`bert.rs`) and the decoders
//! built from encoder architectures (`bert_lm.rs`): q/k/v projections → attention → output
//! dense → residual, then intermediate dense → GELU → output dense → residual, biases
//! everywhere, with its LayerNorms either after each residual add (post-norm, BERT) or on each
//! block's input (pre-norm: Megatron-BERT, RoBERTa-PreLayerNorm, XLM-RoBERTa-XL).

use super::{gelu, layer_norm, layer_norm_into, linear};
use crate::config::Gelu;
use crate::ir::{DType, GraphBuilder};

/// Where a BERT-style layer's two LayerNorms sit (module names inside the layer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EncoderNorms {
    /// `x = LN(x + attn(x))` (`attention.output.LayerNorm`), then `x = LN(x + mlp(x))`
    /// (`output.LayerNorm`): BERT.
    Post,
    /// `x = x + attn(LN(x))`, then `x = x + mlp(LN'(x))`, with the two norm modules named.
    Pre {
        /// The norm on the attention input (e.g. `attention.ln`).
        attention: &'static str,
        /// The norm on the MLP input (e.g. `ln`).
        mlp: &'static str,
    },
}

/// One BERT-style layer: its module, sizes and norms.
#[derive(Debug, Clone, Copy)]
pub struct EncoderLayer<'a> {
    /// The layer module (`encoder.layer.{i}`).
    pub prefix: &'a str,
    /// Hidden size.
    pub hidden: usize,
    /// Width of `intermediate.dense`.
    pub intermediate: usize,
    /// Epsilon of the LayerNorms.
    pub eps: f32,
    /// The MLP activation.
    pub gelu: Gelu,
    /// Where the LayerNorms sit.
    pub norms: EncoderNorms,
    /// The model's dtype.
    pub dtype: DType,
}

impl EncoderLayer<'_> {
    /// The layer on the residual stream `x`: `attend` turns the projected q, k, v (3-D) into
    /// the attention result. With `out`, the layer's last value is written to that graph
    /// output (post-norm layers only: a pre-norm layer ends in an `Add`, not a norm).
    pub fn build(
        &self,
        b: &mut GraphBuilder,
        x: &str,
        attend: impl FnOnce(&mut GraphBuilder, [&str; 3]) -> String,
        out: Option<&str>,
    ) -> String {
        let (p, h, eps, dtype) = (self.prefix, self.hidden, self.eps, self.dtype);
        let lin = |b: &mut GraphBuilder, x: &str, name: &str, inp: usize, out: usize| {
            linear(b, x, &format!("{p}.{name}"), inp, out, true, dtype)
        };
        let attn_in = match self.norms {
            EncoderNorms::Post => x.to_string(),
            EncoderNorms::Pre { attention, .. } => {
                layer_norm(b, x, &format!("{p}.{attention}"), h, eps, dtype)
            }
        };
        let q = lin(b, &attn_in, "attention.self.query", h, h);
        let k = lin(b, &attn_in, "attention.self.key", h, h);
        let v = lin(b, &attn_in, "attention.self.value", h, h);
        let y = attend(b, [&q, &k, &v]);
        let o = lin(b, &y, "attention.output.dense", h, h);
        let sum = b.op("Add", &[&o, x], vec![]);
        let x = match self.norms {
            EncoderNorms::Post => {
                let ln = format!("{p}.attention.output.LayerNorm");
                layer_norm(b, &sum, &ln, h, eps, dtype)
            }
            EncoderNorms::Pre { .. } => sum,
        };
        let mlp_in = match self.norms {
            EncoderNorms::Post => x.clone(),
            EncoderNorms::Pre { mlp, .. } => {
                layer_norm(b, &x, &format!("{p}.{mlp}"), h, eps, dtype)
            }
        };
        let up = lin(b, &mlp_in, "intermediate.dense", h, self.intermediate);
        let act = gelu(b, &up, self.gelu);
        let down = lin(b, &act, "output.dense", self.intermediate, h);
        let sum = b.op("Add", &[&down, &x], vec![]);
        match (self.norms, out) {
            (EncoderNorms::Pre { .. }, _) => sum,
            (EncoderNorms::Post, out) => {
                let ln = format!("{p}.output.LayerNorm");
                match out {
                    Some(out) => {
                        layer_norm_into(b, &sum, &ln, h, eps, dtype, out);
                        out.to_string()
                    }
                    None => layer_norm(b, &sum, &ln, h, eps, dtype),
                }
            }
        }
    }
}
