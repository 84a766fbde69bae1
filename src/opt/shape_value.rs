//! Shape tensors read symbolically for the appliers: the value of a class (constant, or the
//! symbolic value the analysis keeps, see [`super::sym_value`]) as [`SymDim`]s that appliers
//! compare with inferred dims (`Shape(x)` gives `x`'s inferred dims).

use egg::Id;

use super::analysis::OnnxGraph;
use crate::ops::infer::literal_ints;
use crate::ops::types::SymDim;

/// The values of class `id` (an integer tensor) as dims, when every one is known or symbolic.
pub fn shape_value(g: &OnnxGraph, id: Id) -> Option<Vec<SymDim>> {
    let data = &g[id].data;
    let values = match &data.konst {
        Some(k) => literal_ints(k)?.into_iter().map(SymDim::Known).collect(),
        None => data.value.clone()?,
    };
    values
        .iter()
        .all(|d| *d != SymDim::Unknown)
        .then_some(values)
}
