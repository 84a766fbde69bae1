//! Projections whose weight is stored `[in, out]` (GPT-2's `Conv1D`): used by `MatMul` as is,
//! possibly a column block of a fused weight.

use super::Activation;
use crate::config::ArchConfig;
use crate::ir::{DType, GraphBuilder, Initializer, TensorSource};

/// Where one projection's weight and bias come from in the checkpoint.
#[derive(Debug, Clone)]
pub struct Conv1dParams {
    /// Checkpoint name of the `[in, out_total]` weight.
    pub weight: String,
    /// Checkpoint name of the `[out_total]` bias.
    pub bias: String,
    /// The output columns `start..start + len` this projection keeps out of `total`
    /// (`None`: all).
    pub columns: Option<(usize, usize, usize)>,
}

impl Conv1dParams {
    /// The whole `{prefix}.weight` / `{prefix}.bias` of one Conv1D.
    pub fn whole(prefix: &str) -> Conv1dParams {
        Conv1dParams {
            weight: format!("{prefix}.weight"),
            bias: format!("{prefix}.bias"),
            columns: None,
        }
    }
}

/// `x @ W + b` with `W` `[in_features, out_features]`: initializers `{name}.weight` and
/// `{name}.bias`, sliced lazily from the checkpoint tensors in `params` when `columns` is set.
pub fn conv1d(
    b: &mut GraphBuilder,
    x: &str,
    name: &str,
    params: &Conv1dParams,
    in_features: usize,
    out_features: usize,
    dtype: DType,
) -> String {
    let source = |tensor: &str, axis: usize| {
        let whole = TensorSource::Checkpoint(tensor.to_string());
        match params.columns {
            None => whole,
            Some((start, len, total)) => TensorSource::Slice {
                source: Box::new(whole),
                axis,
                start,
                len,
                total,
            },
        }
    };
    let w = b.initializer(Initializer {
        name: format!("{name}.weight"),
        dtype,
        shape: vec![in_features, out_features],
        source: Some(source(&params.weight, 1)),
    });
    let y = b.op("MatMul", &[x, &w], vec![]);
    let bias = b.initializer(Initializer {
        name: format!("{name}.bias"),
        dtype,
        shape: vec![out_features],
        source: Some(source(&params.bias, 0)),
    });
    b.op("Add", &[&y, &bias], vec![])
}

/// GPT-2's MLP of module `mlp`: `c_proj(act(c_fc(x)))`, Conv1Ds with biases, the config's
/// hidden and intermediate sizes.
pub fn conv1d_mlp(
    b: &mut GraphBuilder,
    cfg: &ArchConfig,
    x: &str,
    mlp: &str,
    act: Activation,
    dtype: DType,
) -> String {
    let (h, inner) = (cfg.hidden_size, cfg.intermediate_size);
    let fc = format!("{mlp}.c_fc");
    let up = conv1d(b, x, &fc, &Conv1dParams::whole(&fc), h, inner, dtype);
    let up = act.apply(b, &up);
    let proj = format!("{mlp}.c_proj");
    conv1d(b, &up, &proj, &Conv1dParams::whole(&proj), inner, h, dtype)
}
