//! The side condition of `q-scale-into-attention` (`rewrites/recognize/attention_q_scale.rules`):
//! q scaled by a power of two before the attention scores (OPT's eager attention).

use egg::Id;

use crate::opt::analysis::OnnxGraph;
use crate::opt::query::scalar_float;

/// `?q ?c`: `c` is a one-element float constant of q's dtype, a positive power of two
/// (normal in f32), of rank at most q's (so `Mul(q, c)` has q's dims).
pub fn power_of_two_scale_of(g: &OnnxGraph, [q, c]: [Id; 2]) -> bool {
    let (Some(qt), Some(ct)) = (g[q].data.tensor(), g[c].data.tensor()) else {
        return false;
    };
    let fits = matches!((qt.rank(), ct.rank()), (Some(qr), Some(cr)) if cr <= qr);
    let power_of_two = scalar_float(g, c).is_some_and(|v| {
        let e = v.log2().round();
        v > 0.0 && v.is_finite() && (-126.0..=127.0).contains(&e) && 2f64.powi(e as i32) == v
    });
    fits && qt.dtype.is_some() && qt.dtype == ct.dtype && power_of_two
}
