//! Feed-forward blocks: gated `down(act(gate(x)) · up(x))`, ungated `down(act(up(x)))` and
//! squared ReLU `down(relu(up(x))²)`.

use super::{linear, Activation};
use crate::config::Gelu;
use crate::ir::{Attr, DType, GraphBuilder};

/// The activation a gated MLP applies to its gate projection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateActivation {
    /// SiLU written as `g · Sigmoid(g)` (SwiGLU).
    Silu,
    /// Opset-20 `Gelu` of this form, its `approximate` attribute always written (Gemma's
    /// GeGLU).
    Gelu(Gelu),
}

/// Gated MLP `down(act(gate(x)) · up(x))` over the `{prefix}.{gate,up,down}_proj` linears
/// (with biases when `bias`); `sizes` is `(hidden, intermediate)`.
pub fn gated_mlp(
    b: &mut GraphBuilder,
    x: &str,
    prefix: &str,
    (hidden, intermediate): (usize, usize),
    bias: bool,
    act: GateActivation,
    dtype: DType,
) -> String {
    let proj = |b: &mut GraphBuilder, x: &str, name: &str, inp: usize, out: usize| {
        linear(b, x, &format!("{prefix}.{name}"), inp, out, bias, dtype)
    };
    let gate = proj(b, x, "gate_proj", hidden, intermediate);
    let gate = match act {
        GateActivation::Silu => {
            let sig = b.op("Sigmoid", &[&gate], vec![]);
            b.op("Mul", &[&gate, &sig], vec![])
        }
        GateActivation::Gelu(form) => b.op(
            "Gelu",
            &[&gate],
            vec![("approximate", Attr::String(form.approximate().into()))],
        ),
    };
    let up = proj(b, x, "up_proj", hidden, intermediate);
    let prod = b.op("Mul", &[&gate, &up], vec![]);
    proj(b, &prod, "down_proj", intermediate, hidden)
}

/// `{prefix}.{down}(act({prefix}.{up}(x)))` with the config's hidden and intermediate sizes
/// and MLP biases: the ungated MLP of GPT-2-like families (the names are the checkpoint's).
pub fn ungated_mlp(
    b: &mut GraphBuilder,
    cfg: &crate::config::ArchConfig,
    x: &str,
    (prefix, up, down): (&str, &str, &str),
    act: Activation,
    dtype: DType,
) -> String {
    let (h, inner, bias) = (cfg.hidden_size, cfg.intermediate_size, cfg.mlp_bias);
    let hidden = linear(b, x, &format!("{prefix}.{up}"), h, inner, bias, dtype);
    let hidden = act.apply(b, &hidden);
    linear(
        b,
        &hidden,
        &format!("{prefix}.{down}"),
        inner,
        h,
        bias,
        dtype,
    )
}

/// `{prefix}.{down}(relu({prefix}.{up}(x))²)` with the config's hidden and intermediate sizes
/// and MLP biases: the ungated squared-ReLU MLP (`relu2`) of Nemotron and Persimmon (the names
/// are the checkpoint's).
pub fn squared_relu_mlp(
    b: &mut GraphBuilder,
    cfg: &crate::config::ArchConfig,
    x: &str,
    (prefix, up, down): (&str, &str, &str),
    dtype: DType,
) -> String {
    let (h, inner, bias) = (cfg.hidden_size, cfg.intermediate_size, cfg.mlp_bias);
    let up = linear(b, x, &format!("{prefix}.{up}"), h, inner, bias, dtype);
    let relu = b.op("Relu", &[&up], vec![]);
    let squared = b.op("Mul", &[&relu, &relu], vec![]);
    linear(
        b,
        &squared,
        &format!("{prefix}.{down}"),
        inner,
        h,
        bias,
        dtype,
    )
}

/// Activation sparsity by a Gaussian top-k (Gemma 3n's MLP gates): over the last axis of
/// `x`, `relu(x − (mean(x) + std(x) · multiplier))` with the population std; `multiplier` is
/// the standard normal quantile of the share of activations to zero ([`normal_quantile`]).
pub fn gaussian_top_k(b: &mut GraphBuilder, x: &str, multiplier: f32, dtype: DType) -> String {
    let last = b.const_i64(&[-1]);
    let keep = || vec![("keepdims", Attr::Int(1))];
    let mean = b.op("ReduceMean", &[x, &last], keep());
    let centred = b.op("Sub", &[x, &mean], vec![]);
    let square = b.op("Mul", &[&centred, &centred], vec![]);
    let variance = b.op("ReduceMean", &[&square, &last], keep());
    let std = b.op("Sqrt", &[&variance], vec![]);
    let multiplier = super::scalar(b, multiplier, dtype);
    let spread = b.op("Mul", &[&std, &multiplier], vec![]);
    let cutoff = b.op("Add", &[&mean, &spread], vec![]);
    let shifted = b.op("Sub", &[x, &cutoff], vec![]);
    b.op("Relu", &[&shifted], vec![])
}

/// The standard normal quantile of `p` in `(0, 1)`: the `x` with `Φ(x) = p`
/// (`sqrt(2) · erfinv(2p − 1)`), found by bisection on [`normal_cdf`] to f64 precision.
pub fn normal_quantile(p: f64) -> f64 {
    let (mut low, mut high) = (-40.0f64, 40.0f64);
    for _ in 0..200 {
        let mid = 0.5 * (low + high);
        if mid == low || mid == high {
            break;
        }
        match normal_cdf(mid) < p {
            true => low = mid,
            false => high = mid,
        }
    }
    0.5 * (low + high)
}

/// The standard normal CDF `Φ(x) = erfc(−x / sqrt(2)) / 2`: erf's Taylor series near 0,
/// erfc's continued fraction in the tails.
fn normal_cdf(x: f64) -> f64 {
    let z = x / std::f64::consts::SQRT_2;
    if z.abs() < 2.5 {
        // erf(z) = 2/sqrt(π) Σ (−1)ⁿ z^(2n+1) / (n! (2n+1))
        let (mut term, mut sum) = (z, z);
        for n in 1..200 {
            term *= -z * z / n as f64;
            let next = term / (2 * n + 1) as f64;
            sum += next;
            if next.abs() < 1e-18 * sum.abs() {
                break;
            }
        }
        return 0.5 * (1.0 + 2.0 / std::f64::consts::PI.sqrt() * sum);
    }
    // erfc(t) = exp(−t²)/sqrt(π) · 1/(t + (1/2)/(t + 1/(t + (3/2)/(t + …)))), t > 0
    let t = z.abs();
    let mut fraction = t;
    for k in (1..120).rev() {
        fraction = t + (k as f64 / 2.0) / fraction;
    }
    let erfc = (-t * t).exp() / std::f64::consts::PI.sqrt() / fraction;
    match z > 0.0 {
        true => 1.0 - 0.5 * erfc,
        false => 0.5 * erfc,
    }
}

#[cfg(test)]
mod tests {
    use super::normal_quantile;

    #[test]
    fn normal_quantiles_match_known_values() {
        // scipy.stats.norm.ppf
        for (p, want) in [
            (0.5, 0.0),
            (0.95, 1.6448536269514722),
            (0.975, 1.959963984540054),
            (0.1, -1.2815515655446004),
            (0.999, 3.090232306167813),
            (1e-6, -4.753424308822899),
        ] {
            let got = normal_quantile(p);
            assert!((got - want).abs() < 1e-9, "{p}: {got} != {want}");
        }
    }
}
