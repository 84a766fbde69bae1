//! Absolute position embeddings added to the token embeddings: learned tables (GPT-2, OPT)
//! and sinusoidal ones (XGLM, CTRL) gathered by `position_ids`.

use crate::ir::{Attr, DType, GraphBuilder, Initializer, TensorData, TensorSource};

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
    let index = shifted(b, position_ids, offset);
    b.op("Gather", &[&table, &index], vec![("axis", Attr::Int(0))])
}

/// The rows of a sinusoidal table `[rows, 2·inv_freq.len()]`, `[sin(p·f) | cos(p·f)]` for
/// positions `p = 0..rows` (XGLM, CTRL), for `position_ids` moved by `offset`: the table is the
/// initializer `name`, computed in f32 when the model is saved, with row `zero_row` (XGLM's
/// padding index) all zeros where it is given and inside the table.
#[allow(clippy::too_many_arguments)]
pub fn sinusoidal_positions(
    b: &mut GraphBuilder,
    name: &str,
    inv_freq: &[f32],
    rows: usize,
    zero_row: Option<usize>,
    position_ids: &str,
    offset: i64,
    dtype: DType,
) -> String {
    let width = 2 * inv_freq.len();
    let half = |sine| TensorSource::RotaryTable {
        inv_freq: inv_freq.to_vec(),
        positions: rows,
        sine,
    };
    let table = TensorSource::Concat {
        parts: vec![half(true), half(false)],
        axis: 1,
    };
    let source = match zero_row {
        Some(row) if row < rows => {
            let slice = |start, len| TensorSource::Slice {
                source: Box::new(table.clone()),
                axis: 0,
                start,
                len,
                total: rows,
            };
            let zeros = TensorData::from_f32(vec![1, width], &vec![0.0; width]);
            let parts = vec![
                slice(0, row),
                TensorSource::Inline(zeros),
                slice(row + 1, rows - row - 1),
            ];
            let parts = parts.into_iter().filter(|p| match p {
                TensorSource::Slice { len, .. } => *len > 0,
                _ => true,
            });
            TensorSource::Concat {
                parts: parts.collect(),
                axis: 0,
            }
        }
        _ => table,
    };
    let table = b.initializer(Initializer {
        name: name.to_string(),
        dtype,
        shape: vec![rows, width],
        source: Some(source),
    });
    let index = shifted(b, position_ids, offset);
    b.op("Gather", &[&table, &index], vec![("axis", Attr::Int(0))])
}

/// `position_ids + offset` (`position_ids` itself for 0).
fn shifted(b: &mut GraphBuilder, position_ids: &str, offset: i64) -> String {
    if offset == 0 {
        return position_ids.to_string();
    }
    let offset = b.scalar_i64(offset);
    b.op("Add", &[position_ids, &offset], vec![])
}
