//! ALiBi (attention with linear biases): instead of rotating q and k, each head adds
//! `slope[h] · position(key)` to its scores. Adding one constant to a whole score row leaves its
//! softmax unchanged, so the bias by the key's position equals the paper's bias by the
//! query-key distance.
//!
//! The bias joins the boolean mask as the attention's float mask `[B, Hq, S, T]`:
//!
//! ```text
//! position[b, j] = CumSum(attention_mask)[b, j] − 1                 (valid tokens before key j)
//! bias[b, h, i, j] = mask[b, 0, i, j] ? slope[h] · position[b, j] : lowest(dtype)
//! ```
//!
//! computed in f32 and cast to the model dtype, as transformers builds it. Counting valid
//! tokens rather than cache slots makes a left- or right-padded row's bias differ from the
//! unpadded row's by a constant only. GroupQueryAttention takes no such bias, so the
//! GroupQueryAttention fusion declines this mask (it accepts only the padding and
//! sliding-window masks) and the attention stays opset-24 `Attention` (or its standard-op
//! decomposition where the EP lacks it).

use crate::ir::{Attr, DType, GraphBuilder, TensorData};

/// The name prefix of every ALiBi bias value; the optimizer keeps it, so the GroupQueryAttention
/// warning can say why an attention stayed `Attention`.
pub const ALIBI_BIAS: &str = "alibi_bias";

/// The slopes of the ALiBi paper (and BLOOM, Falcon) for `heads` heads: with `n` the largest
/// power of two at most `heads`, `2^(−8k/n)` for `k = 1 … n`, then for the remaining heads the
/// odd steps of the `2n` sequence, `2^(−4k/n)` for `k = 1, 3, 5, …`.
pub fn alibi_slopes(heads: usize) -> Vec<f32> {
    let n = 1usize << heads.max(1).ilog2();
    let powers = |count: usize, step: f64, odd: bool| {
        (0..count).map(move |i| {
            let k = if odd { 2 * i + 1 } else { i + 1 };
            (2f64).powf(-step * k as f64) as f32
        })
    };
    let mut slopes: Vec<f32> = powers(n, 8.0 / n as f64, false).collect();
    slopes.extend(powers(heads - n, 4.0 / n as f64, true));
    slopes
}

/// The float mask of [the module docs](self): `mask` (`[B, 1, S, T]`, boolean) with the ALiBi
/// bias of `slopes` (one per query head, already multiplied by any score scale the family
/// applies to it) over the valid-token positions of `attention_mask`, named
/// `{ALIBI_BIAS}{suffix}`.
pub fn alibi_bias(
    b: &mut GraphBuilder,
    mask: &str,
    attention_mask: &str,
    slopes: &[f32],
    dtype: DType,
    suffix: &str,
) -> String {
    let axis1 = b.scalar_i64(1);
    let ordinal = b.op("CumSum", &[attention_mask, &axis1], vec![]);
    let one = b.scalar_i64(1);
    let position = b.op("Sub", &[&ordinal, &one], vec![]);
    let to_f32 = ("to", Attr::Int(DType::F32.onnx_code() as i64));
    let position = b.op("Cast", &[&position], vec![to_f32]);
    let axes = b.const_i64(&[1, 2]);
    let position = b.op("Unsqueeze", &[&position, &axes], vec![]);
    let slopes = b.constant(TensorData::from_f32(vec![1, slopes.len(), 1, 1], slopes));
    let mut bias = b.op("Mul", &[&slopes, &position], vec![]);
    if dtype != DType::F32 {
        let to = ("to", Attr::Int(dtype.onnx_code() as i64));
        bias = b.op("Cast", &[&bias], vec![to]);
    }
    let lowest = super::scalar(b, lowest(dtype), dtype);
    let name = format!("{ALIBI_BIAS}{suffix}");
    b.op_into("Where", &[mask, &bias, &lowest], vec![], &name);
    name
}

/// The lowest finite value of float `dtype` (what transformers fills masked scores with).
pub(crate) fn lowest(dtype: DType) -> f32 {
    match dtype {
        DType::F16 => -65504.0,
        DType::BF16 => -3.389_531_4e38,
        _ => f32::MIN,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slopes_follow_the_paper() {
        assert_eq!(alibi_slopes(4), [0.25, 0.0625, 0.015625, 0.00390625]);
        assert_eq!(alibi_slopes(8)[0], 0.5);
        // 6 heads: the 4-head slopes, then 2^(−1), 2^(−3) (the odd steps of the 8-head ones).
        assert_eq!(
            alibi_slopes(6),
            [0.25, 0.0625, 0.015625, 0.00390625, 0.5, 0.125]
        );
        assert_eq!(alibi_slopes(1), [2f32.powi(-8)]);
    }
}
