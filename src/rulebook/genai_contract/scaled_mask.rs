//! transformers' float 4-D causal mask ([`super::float_export_mask`]) divided by a constant,
//! as it reaches the Attention of CodeGen's eager attention: `Softmax((q·kᵀ + M) / c)` is read
//! (rule `scaled-after-mask`) as `q·kᵀ / c + M / c`, so the Attention's mask is `M / c`.
//!
//! What GroupQueryAttention's mask semantics need of a mask: a masked key gets weight exactly 0
//! after the Softmax, an unmasked key the weight it has without the mask. Here:
//! - an unmasked element of `M` is `±0`, and `±0 / c = ±0` for any `c > 0`: the score is
//!   unchanged (`s + ±0 = s`);
//! - a masked element is `−FLT_MAX`, and for `1 ≤ c ≤ 2^24`, `L = fl(−FLT_MAX / c)` is finite
//!   (`c ≥ 1`: no overflow to `−∞`) and `L ≤ −FLT_MAX / 2^24 < −2^103`. Every row has one
//!   unmasked key (the causal diagonal, under the contract: a right-padded prompt's padded
//!   queries still see the row's first key), so the row's maximum `m` is at least that key's
//!   score `s_d`, and a masked key's `fl(s_j + L) − m ≤ (s_j − s_d) − 2^103` (rounding is
//!   monotone), below `−104` — where `exp` is exactly 0 in f32 — whenever the row's scores lie
//!   within `2^102` of each other: weight exactly 0, as with `M` itself (whose `−FLT_MAX`
//!   needs the same of the scores, within `2^126`).
//!
//! Outside the bounds the argument does not hold: `c < 1` overflows `−FLT_MAX / c` to `−∞`
//! (not a finite mask value any more), and a `c` near `2^126` leaves the masked scores near
//! `−4`, weighted about `e^−4` instead of 0.

use egg::Id;

use super::{float_export_mask, ExportMask};
use crate::ir::DType;
use crate::opt::analysis::OnnxGraph;
use crate::opt::query::{ops_named, scalar_float};

/// The largest divisor read: `−FLT_MAX / 2^24 < −2^103` (see the module doc).
const MAX_DIVISOR: f64 = 16_777_216.0;

/// Reads `mask` as `Div(M, c)`, `M` what [`float_export_mask`] reads (same `q`, `past_key`)
/// and `c` a one-element f32 constant with `1 ≤ c ≤ 2^24`: the same predicate as `M`'s (see
/// the module doc for why the masked keys still get weight exactly 0).
pub fn scaled_float_export_mask(
    g: &OnnxGraph,
    mask: Id,
    q: Id,
    past_key: Id,
) -> Option<ExportMask> {
    ops_named(g, mask, "Div").into_iter().find_map(|div| {
        let [m, c] = div.input_ids() else {
            return None;
        };
        let divisor = scalar_float(g, *c)?;
        let f32_one =
            g[*c].data.tensor()?.dtype == Some(DType::F32) && g[*c].data.tensor()?.rank()? <= 1;
        if !f32_one || !(1.0..=MAX_DIVISOR).contains(&divisor) {
            return None;
        }
        float_export_mask(g, *m, q, past_key)
    })
}
