//! The BERT-style transformer layer, shared by the encoders (`bert.rs`) and the decoders
//! built from encoder architectures (`bert_lm.rs`, `bart_lm.rs`): q/k/v projections →
//! attention → output dense → residual, then dense → GELU → dense → residual, biases
//! everywhere, with its LayerNorms either after each residual add (post-norm: BERT, BART) or on
//! each block's input (pre-norm: Megatron-BERT, RoBERTa-PreLayerNorm, XLM-RoBERTa-XL, mBART).

use super::{gelu, layer_norm, layer_norm_into, linear};
use crate::config::Gelu;
use crate::ir::{DType, GraphBuilder};

/// The projection modules of a BERT-style layer (names inside the layer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayerNames {
    /// The query, key, value and attention output projections.
    pub attention: [&'static str; 4],
    /// The MLP's up and down projections.
    pub mlp: [&'static str; 2],
}

impl LayerNames {
    /// BERT's (`attention.self.query` … `attention.output.dense`, `intermediate.dense`,
    /// `output.dense`).
    pub const BERT: LayerNames = LayerNames {
        attention: [
            "attention.self.query",
            "attention.self.key",
            "attention.self.value",
            "attention.output.dense",
        ],
        mlp: ["intermediate.dense", "output.dense"],
    };
    /// BART's (`self_attn.q_proj` … `self_attn.out_proj`, `fc1`, `fc2`).
    pub const BART: LayerNames = LayerNames {
        attention: [
            "self_attn.q_proj",
            "self_attn.k_proj",
            "self_attn.v_proj",
            "self_attn.out_proj",
        ],
        mlp: ["fc1", "fc2"],
    };
}

/// Where a BERT-style layer's two LayerNorms sit (module names inside the layer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EncoderNorms {
    /// `x = LN(x + attn(x))`, then `x = LN'(x + mlp(x))`, with the two norm modules named
    /// (BERT: `attention.output.LayerNorm`, `output.LayerNorm`).
    Post {
        /// The norm after the attention's residual add.
        attention: &'static str,
        /// The norm after the MLP's residual add.
        mlp: &'static str,
    },
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
    /// Its projection modules.
    pub names: LayerNames,
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

impl EncoderNorms {
    /// BERT's post-norm layer norms.
    pub const BERT: EncoderNorms = EncoderNorms::Post {
        attention: "attention.output.LayerNorm",
        mlp: "output.LayerNorm",
    };
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
        let [q, k, v, o] = self.names.attention;
        let [up, down] = self.names.mlp;
        let norm = |b: &mut GraphBuilder, x: &str, module: &str| {
            layer_norm(b, x, &format!("{p}.{module}"), h, eps, dtype)
        };
        let attn_in = match self.norms {
            EncoderNorms::Post { .. } => x.to_string(),
            EncoderNorms::Pre { attention, .. } => norm(b, x, attention),
        };
        let q = lin(b, &attn_in, q, h, h);
        let k = lin(b, &attn_in, k, h, h);
        let v = lin(b, &attn_in, v, h, h);
        let y = attend(b, [&q, &k, &v]);
        let o = lin(b, &y, o, h, h);
        let sum = b.op("Add", &[&o, x], vec![]);
        let x = match self.norms {
            EncoderNorms::Post { attention, .. } => norm(b, &sum, attention),
            EncoderNorms::Pre { .. } => sum,
        };
        let mlp_in = match self.norms {
            EncoderNorms::Post { .. } => x.clone(),
            EncoderNorms::Pre { mlp, .. } => norm(b, &x, mlp),
        };
        let up = lin(b, &mlp_in, up, h, self.intermediate);
        let act = gelu(b, &up, self.gelu);
        let down = lin(b, &act, down, self.intermediate, h);
        let sum = b.op("Add", &[&down, &x], vec![]);
        match self.norms {
            EncoderNorms::Pre { .. } => sum,
            EncoderNorms::Post { mlp, .. } => match out {
                Some(out) => {
                    let ln = format!("{p}.{mlp}");
                    layer_norm_into(b, &sum, &ln, h, eps, dtype, out);
                    out.to_string()
                }
                None => norm(b, &sum, mlp),
            },
        }
    }
}
