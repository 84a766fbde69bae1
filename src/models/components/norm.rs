//! Normalisation layers: RMSNorm (HF `weight`, Gemma's `1 + weight`, or NanoChat's without
//! parameters) and LayerNorm (HF `weight` and `bias`, Nemotron's `1 + weight`, or OLMo's
//! without parameters), and the per-head form used on queries and keys.

use crate::ir::{Attr, DType, GraphBuilder, Initializer, TensorData, TensorSource};

/// Which normalisation a model applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NormKind {
    /// `RMSNormalization` scaled by the checkpoint's `{module}.weight`.
    Rms,
    /// `RMSNormalization` scaled by `1 + {module}.weight` (Gemma).
    OffsetRms,
    /// `LayerNormalization` with `{module}.weight` and `{module}.bias`.
    Layer,
    /// `RMSNormalization` without a learned weight (NanoChat): unit scale.
    PlainRms,
    /// `LayerNormalization` without learned parameters (OLMo): unit scale, no bias.
    PlainLayer,
    /// `LayerNormalization` scaled by `{module}.weight`, without a bias (Cohere).
    UnbiasedLayer,
    /// `LayerNormalization` scaled by `1 + {module}.weight`, with `{module}.bias` (Nemotron's
    /// LayerNorm1P).
    OffsetLayer,
}

/// A normalisation kind and its epsilon.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Norm {
    /// The kind of norm.
    pub kind: NormKind,
    /// The epsilon added to the variance.
    pub eps: f32,
}

impl Norm {
    /// The norm of checkpoint module `module` over the last axis (`width` channels) of `x`.
    pub fn apply(
        &self,
        b: &mut GraphBuilder,
        x: &str,
        module: &str,
        width: usize,
        dtype: DType,
    ) -> String {
        let weight = format!("{module}.weight");
        match self.kind {
            NormKind::Rms => rms_norm(b, x, &weight, width, self.eps, dtype),
            NormKind::OffsetRms => offset_rms_norm(b, x, &weight, width, self.eps, dtype),
            NormKind::Layer => layer_norm(b, x, module, width, self.eps, dtype),
            NormKind::PlainRms => {
                let scale = ones(b, width, dtype);
                rms_normalization(b, x, &scale, self.eps)
            }
            NormKind::PlainLayer => plain_layer_norm(b, x, width, self.eps, dtype),
            NormKind::UnbiasedLayer => unbiased_layer_norm(b, x, &weight, width, self.eps, dtype),
            NormKind::OffsetLayer => offset_layer_norm(b, x, module, width, self.eps, dtype),
        }
    }
}

/// `RMSNormalization(x, {weight}; axis=-1, epsilon)` with the HF weight `weight` (`[width]`).
pub fn rms_norm(
    b: &mut GraphBuilder,
    x: &str,
    weight: &str,
    width: usize,
    eps: f32,
    dtype: DType,
) -> String {
    let gamma = checkpoint_vector(b, weight, width, dtype);
    rms_normalization(b, x, &gamma, eps)
}

/// `RMSNormalization(x, 1 + {weight}; axis=-1, epsilon)` (Gemma). The gamma `1 + w` is an
/// initializer computed in f32 when the model is saved (as transformers computes it) and named
/// `{weight}_plus_one`; being a plain initializer, the norm still fuses with a residual Add
/// into `SkipSimplifiedLayerNormalization`.
pub fn offset_rms_norm(
    b: &mut GraphBuilder,
    x: &str,
    weight: &str,
    width: usize,
    eps: f32,
    dtype: DType,
) -> String {
    let gamma = plus_one(b, weight, format!("{weight}_plus_one"), width, dtype);
    rms_normalization(b, x, &gamma, eps)
}

fn rms_normalization(b: &mut GraphBuilder, x: &str, gamma: &str, eps: f32) -> String {
    b.op(
        "RMSNormalization",
        &[x, gamma],
        vec![("axis", Attr::Int(-1)), ("epsilon", Attr::Float(eps))],
    )
}

/// A `[width]` initializer named `name`, evaluated from `source` when the model is saved.
fn vector(
    b: &mut GraphBuilder,
    name: String,
    width: usize,
    dtype: DType,
    source: TensorSource,
) -> String {
    b.initializer(Initializer {
        name,
        dtype,
        shape: vec![width],
        source: Some(source),
    })
}

/// The checkpoint's `[width]` tensor `name`, as an initializer of the same name.
fn checkpoint_vector(b: &mut GraphBuilder, name: &str, width: usize, dtype: DType) -> String {
    let source = TensorSource::Checkpoint(name.to_string());
    vector(b, name.to_string(), width, dtype, source)
}

/// `1 + {weight}` (computed in f32 when the model is saved) as the initializer `name`.
fn plus_one(
    b: &mut GraphBuilder,
    weight: &str,
    name: String,
    width: usize,
    dtype: DType,
) -> String {
    let source = TensorSource::AddScalar {
        source: Box::new(TensorSource::Checkpoint(weight.to_string())),
        value: 1.0,
    };
    vector(b, name, width, dtype, source)
}

/// The attributes of a last-axis `LayerNormalization`.
fn last_axis(eps: f32) -> Vec<(&'static str, Attr)> {
    vec![("axis", Attr::Int(-1)), ("epsilon", Attr::Float(eps))]
}

/// `norm` of every head vector of `x` (`[B, S, heads·D]`) with the `[D]` weights of `module`:
/// `Reshape [0, 0, heads, D]` → norm over D → `Reshape [0, 0, -1]`. `heads` is written into the
/// first Reshape's target as given (-1 lets Reshape infer it).
pub fn per_head_norm(
    b: &mut GraphBuilder,
    norm: Norm,
    x: &str,
    module: &str,
    heads: i64,
    head_dim: usize,
    dtype: DType,
) -> String {
    let split = b.const_i64(&[0, 0, heads, head_dim as i64]);
    let per_head = b.op("Reshape", &[x, &split], vec![]);
    let normed = norm.apply(b, &per_head, module, head_dim, dtype);
    let merge = b.const_i64(&[0, 0, -1]);
    b.op("Reshape", &[&normed, &merge], vec![])
}

/// `LayerNormalization(x, {prefix}.weight, {prefix}.bias; axis=-1, epsilon)` over the last
/// axis (`width` channels), its output named `out`.
pub fn layer_norm_into(
    b: &mut GraphBuilder,
    x: &str,
    prefix: &str,
    width: usize,
    eps: f32,
    dtype: DType,
    out: &str,
) {
    let w = checkpoint_vector(b, &format!("{prefix}.weight"), width, dtype);
    let bias = checkpoint_vector(b, &format!("{prefix}.bias"), width, dtype);
    b.op_into("LayerNormalization", &[x, &w, &bias], last_axis(eps), out);
}

/// `LayerNormalization(x, ones; axis=-1, epsilon)` over the last axis (`width` channels):
/// normalised, neither scaled nor shifted. The unit scale is one constant shared by every such
/// norm.
pub fn plain_layer_norm(
    b: &mut GraphBuilder,
    x: &str,
    width: usize,
    eps: f32,
    dtype: DType,
) -> String {
    let scale = ones(b, width, dtype);
    b.op("LayerNormalization", &[x, &scale], last_axis(eps))
}

/// The constant `[width]` vector of ones in `dtype`: the unit scale of the norms without
/// learned parameters (one constant shared by every such norm of a width).
fn ones(b: &mut GraphBuilder, width: usize, dtype: DType) -> String {
    let mut bytes = Vec::new();
    let ones = vec![1.0f32; width];
    crate::weights::convert::convert_into(
        bytemuck::cast_slice(&ones),
        DType::F32,
        dtype,
        &mut bytes,
    );
    b.constant(TensorData {
        dtype,
        shape: vec![width],
        bytes,
    })
}

/// `LayerNormalization(x, {weight}; axis=-1, epsilon)` over the last axis (`width`
/// channels): scaled by the checkpoint's `weight`, not shifted.
pub fn unbiased_layer_norm(
    b: &mut GraphBuilder,
    x: &str,
    weight: &str,
    width: usize,
    eps: f32,
    dtype: DType,
) -> String {
    let scale = checkpoint_vector(b, weight, width, dtype);
    b.op("LayerNormalization", &[x, &scale], last_axis(eps))
}

/// `LayerNormalization(x, 1 + {prefix}.weight, {prefix}.bias; axis=-1, epsilon)` over the last
/// axis (`width` channels): the scale `1 + w` is an initializer computed in f32 when the model
/// is saved, named `{prefix}.weight_plus_one`.
pub fn offset_layer_norm(
    b: &mut GraphBuilder,
    x: &str,
    prefix: &str,
    width: usize,
    eps: f32,
    dtype: DType,
) -> String {
    let weight = format!("{prefix}.weight");
    let scale = plus_one(b, &weight, format!("{weight}_plus_one"), width, dtype);
    let bias = checkpoint_vector(b, &format!("{prefix}.bias"), width, dtype);
    b.op("LayerNormalization", &[x, &scale, &bias], last_axis(eps))
}

/// [`layer_norm_into`] a fresh value, which it returns.
pub fn layer_norm(
    b: &mut GraphBuilder,
    x: &str,
    prefix: &str,
    width: usize,
    eps: f32,
    dtype: DType,
) -> String {
    let out = b.fresh_name("LayerNormalization");
    layer_norm_into(b, x, prefix, width, eps, dtype, &out);
    out
}
