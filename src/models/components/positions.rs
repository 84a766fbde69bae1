//! Absolute position embeddings added to the token embeddings: learned tables (GPT-2, OPT)
//! gathered by `position_ids`.

use crate::ir::{Attr, DType, GraphBuilder, Initializer, TensorSource};

/// The rows of the learned table `{module}.weight` (`[rows, width]`) for `position_ids` moved
/// by `offset` (OPT's tables start 2 rows in): `Gather(table, position_ids + offset)`.
pub fn learned_positions(
    b: &mut GraphBuilder,
    module: &str,
    [rows, width]: [usize; 2],
    position_ids: &str,
    offset: i64,
    dtype: DType,
) -> String {
    b.set_scope(module);
    let table = b.initializer(Initializer {
        name: format!("{module}.weight"),
        dtype,
        shape: vec![rows, width],
        source: Some(TensorSource::Checkpoint(format!("{module}.weight"))),
    });
    let index = if offset == 0 {
        position_ids.to_string()
    } else {
        let offset = b.scalar_i64(offset);
        b.op("Add", &[position_ids, &offset], vec![])
    };
    b.op("Gather", &[&table, &index], vec![("axis", Attr::Int(0))])
}
