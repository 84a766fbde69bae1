//! The applier of CodeGen's grouped qkv projection (`recognize/grouped_qkv.rules`): each part
//! of the split `[B, S, G, C]` view of the projection read as a column gather of it.

use egg::Id;

use crate::ops::schema;
use crate::ops::value::AttrValue;
use crate::opt::analysis::OnnxGraph;
use crate::opt::bind::{Applier, Site};
use crate::opt::checked_union::check_union;
use crate::opt::emit::Emit;
use crate::opt::fold::MAX_OUTPUT_ELEMS;
use crate::opt::lang::Onnx;
use crate::opt::query::{const_ints, int_attr, known_dims};

/// `split-of-grouped-columns`.
pub(super) const SPLIT_OF_GROUPED_COLUMNS: Applier<6> = Applier::new(
    ["?y", "?shape", "?allowzero", "?sizes", "?axis", "?n"],
    split_of_grouped_columns,
);

/// The columns `[g·C + o + t for g < G, t < w]`: part `(o, w)` of every group of `C` columns.
fn group_columns(groups: i64, width: i64, offset: i64, part: i64) -> Vec<i64> {
    (0..groups)
        .flat_map(|g| (0..part).map(move |t| g * width + offset + t))
        .collect()
}

/// Reads `?y ?shape ?allowzero ?sizes ?axis ?n` of `(get0 (Split/3 (Reshape ?y ?shape
/// ?allowzero) ?sizes ?axis ?n))`: `y` `[B, S, N]` (N known), the Reshape's dims `[B, S, G, C]`
/// (y's own B and S, G and C known, G·C = N), the split on axis 3 (or −1) into three parts of
/// constant sizes summing to C → output `i` (offset `o`, width `w`) is
/// `Reshape(Gather(y, group_columns, axis 2), [0, 0, G, w])` (see the rule file). Outputs 1 and
/// 2 united here (checked), output 0 returned.
fn split_of_grouped_columns(g: &mut OnnxGraph, site: Site<'_>, vars: [Id; 6]) -> Option<Id> {
    let [y, shape, allowzero, sizes, axis, n] = vars;
    let dims = known_dims(g, y, 3)?;
    let width = dims[2].known()?;
    let reshape = g.lookup(Onnx::op(
        "Reshape",
        schema("Reshape")?,
        2,
        1,
        vec![y, shape, allowzero],
    ))?;
    let split = known_dims(g, reshape, 4)?;
    let (groups, columns) = (split[2].known()?, split[3].known()?);
    if split[0] != dims[0]
        || split[1] != dims[1]
        || groups <= 0
        || columns <= 0
        || groups.checked_mul(columns)? != width
    {
        return None;
    }
    if !matches!(int_attr(g, axis)?, 3 | -1)
        || !matches!(g[n].data.attr(), Some(AttrValue::Unset | AttrValue::Int(3)))
    {
        return None;
    }
    // The Gathers' indices are constants of the graph: as many as y has columns, at most what
    // one folded constant may hold.
    if usize::try_from(width).ok()? > MAX_OUTPUT_ELEMS {
        return None;
    }
    let parts = const_ints(g, sizes)?;
    let total = parts.iter().try_fold(0i64, |sum, &p| sum.checked_add(p));
    if parts.len() != 3 || parts.iter().any(|&p| p <= 0) || total != Some(columns) {
        return None;
    }
    let old = g.lookup(Onnx::op(
        "Split",
        schema("Split")?,
        2,
        3,
        vec![reshape, sizes, axis, n],
    ))?;
    let mut e = Emit::new(g);
    let two = AttrValue::Int(2);
    let mut offset = 0;
    let mut out = Vec::new();
    for &part in &parts {
        let index = e.ints(&group_columns(groups, columns, offset, part));
        let gathered = e.op("Gather", &[y, index], &[("axis", two.clone())]);
        out.push(e.reshape(gathered, &[0, 0, groups, part]));
        offset += part;
    }
    for index in [1, 2] {
        let was = g.add(Onnx::Get {
            index,
            tuple: [old],
        });
        let now = out[index];
        if check_union(g, was, now, site.rule) {
            g.union(was, now);
        }
    }
    Some(out[0])
}

#[cfg(test)]
mod tests {
    use super::group_columns;

    #[test]
    fn group_columns_take_the_part_of_every_group() {
        // Two groups of 6 columns, the part at offset 2 of width 2: columns 2 3 and 8 9.
        assert_eq!(group_columns(2, 6, 2, 2), vec![2, 3, 8, 9]);
    }
}
