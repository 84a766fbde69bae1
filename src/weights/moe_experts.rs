//! [`TensorSource::MoeExperts`]: the stacked expert weights of a dense mixture-of-experts block
//! ([`crate::models::components::sparse_moe`]) re-laid out per expert for
//! `com.microsoft::MoE`, or the stacks read back from the op's weights, written as the
//! per-expert row and column blocks of the tensors they are made of ([`expand`]). Those blocks are simplified against the stacks' own sources
//! ([`simplify`]): a block of a concatenation is the part it covers and a transpose of a
//! transpose is the tensor, so the relayout of stacks built from checkpoint tensors reads each
//! expert's checkpoint tensors in place, one expert after the other (memory as for one dense
//! weight, whatever the number of experts).

use super::eval::{Evaluator, SourceInfo};
use crate::ir::{MoeLayer, TensorSource};
use crate::{Error, Result};

/// The sizes `(E, H, I)` of a relayout of `experts` experts over a tensor of shape `shape`
/// (`[H, 2·E·I]` for [`MoeLayer::Fc1`], `[E·I, H]` for [`MoeLayer::Fc2`], `[E, 2·I, H]` for
/// the gate and up stacks, `[E, H, I]` for the down stack).
fn sizes(shape: &[usize], experts: usize, layer: MoeLayer) -> Result<(usize, usize, usize)> {
    let bad = |want: &str| {
        Error::Graph(format!(
            "the MoE {layer:?} relayout of {experts} experts needs a tensor of shape {want}, \
             found {shape:?}"
        ))
    };
    match (layer, shape) {
        (MoeLayer::Fc1, &[h, cols]) if experts > 0 && cols % (2 * experts) == 0 => {
            Ok((experts, h, cols / (2 * experts)))
        }
        (MoeLayer::Fc2, &[rows, h]) if experts > 0 && rows % experts == 0 => {
            Ok((experts, h, rows / experts))
        }
        (MoeLayer::GateStack | MoeLayer::UpStack, &[e, rows, h])
            if e == experts && e > 0 && rows % 2 == 0 =>
        {
            Ok((e, h, rows / 2))
        }
        (MoeLayer::DownStack, &[e, h, i]) if e == experts && e > 0 => Ok((e, h, i)),
        (MoeLayer::Fc1, _) => Err(bad("[H, 2·E·I]")),
        (MoeLayer::Fc2, _) => Err(bad("[E·I, H]")),
        (MoeLayer::GateStack | MoeLayer::UpStack, _) => Err(bad("[E, 2·I, H]")),
        (MoeLayer::DownStack, _) => Err(bad("[E, H, I]")),
    }
}

/// Type and shape of the relayout over a tensor described by `info`: `[E, 2·I, H]` (fc1),
/// `[E, H, I]` (fc2), `[H, E·I]` (gate and up stacks) or `[E·I, H]` (down stack).
pub(super) fn describe(info: &SourceInfo, experts: usize, layer: MoeLayer) -> Result<SourceInfo> {
    let (e, h, i) = sizes(&info.shape, experts, layer)?;
    let shape = match layer {
        MoeLayer::Fc1 => vec![e, 2 * i, h],
        MoeLayer::Fc2 => vec![e, h, i],
        MoeLayer::GateStack | MoeLayer::UpStack => vec![h, e * i],
        MoeLayer::DownStack => vec![e * i, h],
    };
    Ok(SourceInfo {
        dtype: info.dtype,
        shape,
    })
}

/// The relayout of `source` (described by `info`) as blocks of it, with the relayout's bytes
/// in row-major order: for fc1 the concatenation over experts of `[gate_eᵀ | up_eᵀ]` (`[I,
/// 2·H]`: row `i` holds gate row `i` then up row `i`, i.e. rows `2i` and `2i + 1` of `[2·I,
/// H]`), for fc2 the concatenation of the experts' `down_eᵀ` (`[H, I]`); for the stacks the
/// reverse: expert `e` of fc1 read as `[I, 2·H]`, its first (gate) or second (up) half of
/// columns transposed, side by side, and expert `e` of fc2 transposed, one above the other.
pub(super) fn expand(
    source: &TensorSource,
    info: &SourceInfo,
    experts: usize,
    layer: MoeLayer,
) -> Result<TensorSource> {
    let (e, h, i) = sizes(&info.shape, experts, layer)?;
    let slice = |source: TensorSource, axis: usize, start: usize, len: usize, total: usize| {
        TensorSource::Slice {
            source: Box::new(source),
            axis,
            start,
            len,
            total,
        }
    };
    let transpose = |s: TensorSource| TensorSource::Transpose(Box::new(s));
    // Expert j of a stacked [E, r, c] tensor, read as `shape`.
    let expert = |j: usize, shape: Vec<usize>| TensorSource::Reshape {
        source: Box::new(slice(source.clone(), 0, j, 1, e)),
        shape,
    };
    let block = |axis: usize, start: usize, total: usize| {
        transpose(slice(source.clone(), axis, start, i, total))
    };
    let (parts, axis) = match layer {
        MoeLayer::Fc1 => (
            (0..e)
                .map(|j| TensorSource::Concat {
                    parts: vec![block(1, j * i, 2 * e * i), block(1, (e + j) * i, 2 * e * i)],
                    axis: 1,
                })
                .collect(),
            0,
        ),
        MoeLayer::Fc2 => ((0..e).map(|j| block(0, j * i, e * i)).collect(), 0),
        MoeLayer::GateStack | MoeLayer::UpStack => {
            let start = if layer == MoeLayer::GateStack { 0 } else { h };
            (
                (0..e)
                    .map(|j| transpose(slice(expert(j, vec![i, 2 * h]), 1, start, h, 2 * h)))
                    .collect(),
                1,
            )
        }
        MoeLayer::DownStack => (
            (0..e).map(|j| transpose(expert(j, vec![h, i]))).collect(),
            0,
        ),
    };
    Ok(TensorSource::Concat { parts, axis })
}

/// `src` with blocks of concatenations replaced by the parts they cover, a column block of a
/// transpose by the transpose of a row block, and transposes of transposes removed: the same
/// tensor, read in place where its leaves allow.
pub(super) fn simplify(ev: &Evaluator<'_>, src: TensorSource) -> Result<TensorSource> {
    Ok(match src {
        TensorSource::Transpose(inner) => match simplify(ev, *inner)? {
            TensorSource::Transpose(x) => *x,
            x => TensorSource::Transpose(Box::new(x)),
        },
        TensorSource::Concat { parts, axis } => TensorSource::Concat {
            parts: parts
                .into_iter()
                .map(|p| simplify(ev, p))
                .collect::<Result<_>>()?,
            axis,
        },
        TensorSource::Slice {
            source,
            axis,
            start,
            len,
            total,
        } => {
            let inner = simplify(ev, *source)?;
            if let TensorSource::Concat { parts, axis: a } = &inner {
                if *a == axis {
                    if let Some(block) = part_block(ev, parts, axis, start, len)? {
                        return Ok(block);
                    }
                }
            }
            if let TensorSource::Transpose(x) = &inner {
                if axis == 1 && ev.describe(x)?.shape.len() == 2 {
                    let rows = TensorSource::Slice {
                        source: x.clone(),
                        axis: 0,
                        start,
                        len,
                        total,
                    };
                    return Ok(TensorSource::Transpose(Box::new(simplify(ev, rows)?)));
                }
            }
            TensorSource::Slice {
                source: Box::new(inner),
                axis,
                start,
                len,
                total,
            }
        }
        other => other,
    })
}

/// The block `start..start + len` along `axis` of the concatenation of `parts` along that
/// axis, when it lies within one part (that part, or the block of it); `None` when it spans
/// several.
fn part_block(
    ev: &Evaluator<'_>,
    parts: &[TensorSource],
    axis: usize,
    start: usize,
    len: usize,
) -> Result<Option<TensorSource>> {
    let mut offset = 0;
    for part in parts {
        let Some(&extent) = ev.describe(part)?.shape.get(axis) else {
            return Ok(None);
        };
        if start >= offset && start + len <= offset + extent {
            if start == offset && len == extent {
                return Ok(Some(part.clone()));
            }
            let block = TensorSource::Slice {
                source: Box::new(part.clone()),
                axis,
                start: start - offset,
                len,
                total: extent,
            };
            return simplify(ev, block).map(Some);
        }
        offset += extent;
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{DType, TensorData};

    fn inline(shape: Vec<usize>, values: Vec<f32>) -> TensorSource {
        TensorSource::Inline(TensorData::from_f32(shape, &values))
    }

    fn floats(bytes: &[u8]) -> Vec<f32> {
        bytemuck::cast_slice::<u8, f32>(bytes).to_vec()
    }

    /// Each expert's values of one projection.
    type PerExpert = Vec<Vec<f32>>;

    /// Two experts of width I = 2 on H = 3: the stacks as the block builder writes them.
    fn stacks() -> (PerExpert, PerExpert, PerExpert) {
        let m = |base: f32| -> Vec<f32> { (0..6).map(|v| base + v as f32).collect() };
        // HF [out, in]: gate/up [I, H], down [H, I], per expert.
        (
            vec![m(0.0), m(10.0)],
            vec![m(100.0), m(110.0)],
            vec![m(200.0), m(210.0)],
        )
    }

    fn checkpoint_like(parts: &[Vec<f32>], shape: Vec<usize>, axis: usize) -> TensorSource {
        TensorSource::Concat {
            parts: parts
                .iter()
                .map(|p| TensorSource::Transpose(Box::new(inline(shape.clone(), p.clone()))))
                .collect(),
            axis,
        }
    }

    #[test]
    fn fc1_interleaves_gate_and_up_rows_per_expert() {
        let (gate, up, _) = stacks();
        let stack = TensorSource::Concat {
            parts: vec![
                checkpoint_like(&gate, vec![2, 3], 1),
                checkpoint_like(&up, vec![2, 3], 1),
            ],
            axis: 1,
        };
        let src = TensorSource::MoeExperts {
            source: Box::new(stack),
            experts: 2,
            layer: MoeLayer::Fc1,
        };
        let (dtype, shape, bytes) = Evaluator::new(None).materialize(&src).unwrap();
        assert_eq!((dtype, shape), (DType::F32, vec![2, 4, 3]));
        let mut want = Vec::new();
        for e in 0..2 {
            for i in 0..2 {
                want.extend_from_slice(&gate[e][i * 3..][..3]);
                want.extend_from_slice(&up[e][i * 3..][..3]);
            }
        }
        assert_eq!(floats(&bytes), want);
    }

    #[test]
    fn fc2_is_each_experts_down_projection() {
        let (_, _, down) = stacks();
        let src = TensorSource::MoeExperts {
            source: Box::new(checkpoint_like(&down, vec![3, 2], 0)),
            experts: 2,
            layer: MoeLayer::Fc2,
        };
        let mut ev = Evaluator::new(None);
        let (_, shape, bytes) = ev.materialize(&src).unwrap();
        assert_eq!(shape, vec![2, 3, 2]);
        assert_eq!(floats(&bytes), [down[0].clone(), down[1].clone()].concat());
        let mut streamed = Vec::new();
        ev.stream(&src, DType::F32, &mut streamed).unwrap();
        assert_eq!(streamed, bytes);
    }

    #[test]
    fn blocks_of_stacks_simplify_to_the_expert_tensors() {
        let (gate, _, down) = stacks();
        let ev = Evaluator::new(None);
        let stack = checkpoint_like(&gate, vec![2, 3], 1);
        let info = ev.describe(&stack).unwrap();
        let fc2_stack = checkpoint_like(&down, vec![3, 2], 0);
        let fc2_info = ev.describe(&fc2_stack).unwrap();
        let expanded = expand(&fc2_stack, &fc2_info, 2, MoeLayer::Fc2).unwrap();
        let TensorSource::Concat { parts, axis: 0 } = simplify(&ev, expanded).unwrap() else {
            panic!("a concatenation");
        };
        assert_eq!(parts[1], inline(vec![3, 2], down[1].clone()));
        // A block within one part of the gate stack: that part's transpose, sliced.
        let block = TensorSource::Slice {
            source: Box::new(stack),
            axis: 1,
            start: 3,
            len: 1,
            total: info.shape[1],
        };
        let simplified = simplify(&ev, TensorSource::Transpose(Box::new(block))).unwrap();
        assert_eq!(
            simplified,
            TensorSource::Slice {
                source: Box::new(inline(vec![2, 3], gate[1].clone())),
                axis: 0,
                start: 1,
                len: 1,
                total: 2,
            }
        );
    }

    #[test]
    fn experts_stored_stacked_are_read_in_place() {
        // One [E, 2·I, H] tensor (E = 2, I = 2, H = 3), each expert's gate rows then up rows, as
        // the block builder reads Granite-MoE's: gate_e = rows 0..I of expert e, transposed.
        let (e, i, h) = (2, 2, 3);
        let values: Vec<f32> = (0..e * 2 * i * h).map(|v| v as f32).collect();
        let stacked = inline(vec![e, 2 * i, h], values.clone());
        let rows = |j: usize, start: usize| TensorSource::Slice {
            source: Box::new(TensorSource::Reshape {
                source: Box::new(TensorSource::Slice {
                    source: Box::new(stacked.clone()),
                    axis: 0,
                    start: j,
                    len: 1,
                    total: e,
                }),
                shape: vec![2 * i, h],
            }),
            axis: 0,
            start,
            len: i,
            total: 2 * i,
        };
        let stack = |start: usize| TensorSource::Concat {
            parts: (0..e)
                .map(|j| TensorSource::Transpose(Box::new(rows(j, start))))
                .collect(),
            axis: 1,
        };
        let joined = TensorSource::Concat {
            parts: vec![stack(0), stack(i)],
            axis: 1,
        };
        let mut ev = Evaluator::new(None);
        let info = ev.describe(&joined).unwrap();
        let blocks = simplify(&ev, expand(&joined, &info, e, MoeLayer::Fc1).unwrap()).unwrap();
        let TensorSource::Concat { parts, axis: 0 } = &blocks else {
            panic!("a concatenation over experts");
        };
        for part in parts {
            assert!(
                ev.matrix(part).unwrap().is_some(),
                "{part:?} is not read in place"
            );
        }
        let src = TensorSource::MoeExperts {
            source: Box::new(joined),
            experts: e,
            layer: MoeLayer::Fc1,
        };
        // Gate row r and up row r of expert j are rows r and I + r of its [2·I, H] block.
        let mut want = Vec::new();
        for j in 0..e {
            for r in 0..i {
                want.extend_from_slice(&values[(j * 2 * i + r) * h..][..h]);
                want.extend_from_slice(&values[(j * 2 * i + i + r) * h..][..h]);
            }
        }
        let mut streamed = Vec::new();
        ev.stream(&src, DType::F32, &mut streamed).unwrap();
        assert_eq!(floats(&streamed), want);
    }

    #[test]
    fn stacks_read_back_from_the_op_weights_are_the_stacks() {
        let (gate, up, down) = stacks();
        let ev = Evaluator::new(None);
        let gate_stack = checkpoint_like(&gate, vec![2, 3], 1);
        let up_stack = checkpoint_like(&up, vec![2, 3], 1);
        let down_stack = checkpoint_like(&down, vec![3, 2], 0);
        let relayout = |source: TensorSource, layer| TensorSource::MoeExperts {
            source: Box::new(source),
            experts: 2,
            layer,
        };
        let fc1 = relayout(
            TensorSource::Concat {
                parts: vec![gate_stack.clone(), up_stack.clone()],
                axis: 1,
            },
            MoeLayer::Fc1,
        );
        let fc2 = relayout(down_stack.clone(), MoeLayer::Fc2);
        let mut ev = ev;
        for (stack, back) in [
            (gate_stack, relayout(fc1.clone(), MoeLayer::GateStack)),
            (up_stack, relayout(fc1, MoeLayer::UpStack)),
            (down_stack, relayout(fc2, MoeLayer::DownStack)),
        ] {
            assert_eq!(
                ev.materialize(&back).unwrap(),
                ev.materialize(&stack).unwrap()
            );
        }
    }

    #[test]
    fn a_stack_of_the_wrong_shape_is_one_clear_error() {
        let src = TensorSource::MoeExperts {
            source: Box::new(inline(vec![3, 5], vec![0.0; 15])),
            experts: 2,
            layer: MoeLayer::Fc1,
        };
        let err = Evaluator::new(None).describe(&src).unwrap_err().to_string();
        assert!(
            err.contains("[H, 2·E·I]") && err.contains("[3, 5]"),
            "{err}"
        );
    }
}
