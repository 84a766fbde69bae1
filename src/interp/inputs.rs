//! Random inputs for declared graph inputs, consistent with each other the way the decoder
//! contract is: `position_ids` follow `attention_mask`'s running count, the mask's width covers
//! the past and current tokens. Every shape is checked against the run's budgets before
//! anything is allocated, and the mask and positions against the contract's form (integers,
//! `attention_mask` `[batch, past + current]`, `position_ids` `[batch, current]`): a model that
//! declares them otherwise is refused, naming the input, rather than fed values that do not
//! mean what the names say.

use std::collections::{BTreeMap, HashMap};

use super::Rng;
use crate::interp::run::held_bytes_per_element;
use crate::ir::{DType, Dim, Graph, ValueInfo};
use crate::limits::InterpLimits;
use crate::ops::Tensor;
use crate::{Error, Result};

/// Where a random attention mask puts its padding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Padding {
    /// All ones: no padding.
    None,
    /// Padding before the tokens (the portable graphs take any padding).
    Left,
    /// Padding after the tokens, as GroupQueryAttention expects; only without a past cache
    /// (GroupQueryAttention reads a cache as the first `valid − sequence_len` rows, so a
    /// padded mask with a cache describes a different cache than the portable graph reads).
    Right,
}

/// The name a symbolic dim stands for: the mask's width is spelled `past_seq_len + seq_len`,
/// the cache dims `past_sequence_len` / `sequence_len`; they are the same sizes.
pub fn canonical_dim(name: &str) -> &str {
    match name {
        "seq_len" => "sequence_len",
        "past_seq_len" => "past_sequence_len",
        other => other,
    }
}

/// Size of a symbolic dim when the user does not give one.
pub fn default_dim(name: &str) -> usize {
    let n = name.to_ascii_lowercase();
    if n.contains("past") {
        3
    } else if n.contains("seq") {
        7
    } else {
        1
    }
}

/// The value of a declared dim: fixed, named (looked up in `dims`, the default recorded there
/// when missing), a sum `a + b` of named dims, or unnamed (1, not recorded). Sums saturate, so
/// a huge size reaches the budget check instead of wrapping.
pub fn dim_value(d: &Dim, dims: &mut BTreeMap<String, usize>) -> usize {
    match d {
        Dim::Fixed(v) => usize::try_from(*v).unwrap_or(0),
        Dim::Sym(s) if s.trim().is_empty() => 1,
        Dim::Sym(s) if s.contains(" + ") => s
            .split(" + ")
            .map(|t| dim_value(&Dim::Sym(t.trim().to_string()), dims))
            .fold(0usize, usize::saturating_add),
        Dim::Sym(s) => {
            let name = canonical_dim(s);
            *dims
                .entry(name.to_string())
                .or_insert_with(|| default_dim(name))
        }
    }
}

/// The vocabulary size a token input indexes: the rows of the initializer a `Gather` of it reads.
pub fn vocab_of(graph: &Graph, input: &str) -> Option<usize> {
    graph
        .nodes
        .iter()
        .filter(|n| n.op_type == "Gather" && n.inputs.get(1).map(String::as_str) == Some(input))
        .find_map(|n| {
            graph
                .initializers
                .iter()
                .find(|i| i.name == n.inputs[0])
                .and_then(|i| i.shape.first().copied())
        })
}

/// The concrete shape of every declaration, checked against `limits` (each tensor, and all of
/// them together) before anything is allocated, and the mask and positions against the
/// decoder contract ([`check_contract`]). Errors name the input, its declared shape and the
/// sizes used; a negative fixed size is refused.
pub fn checked_shapes(
    decls: &[ValueInfo],
    dims: &mut BTreeMap<String, usize>,
    limits: &InterpLimits,
) -> Result<Vec<Vec<usize>>> {
    let mut total = 0u64;
    let shapes = decls
        .iter()
        .map(|v| {
            if let Some(Dim::Fixed(n)) = v
                .shape
                .0
                .iter()
                .find(|d| matches!(d, Dim::Fixed(n) if *n < 0))
            {
                return Err(Error::Graph(format!(
                    "input `{}` declares {}, with the negative size {n}",
                    v.name, v.shape
                )));
            }
            let shape: Vec<usize> = v.shape.0.iter().map(|d| dim_value(d, dims)).collect();
            let what = || {
                let sizes: Vec<String> = dims.iter().map(|(k, n)| format!("{k}={n}")).collect();
                format!(
                    "input `{}` (declared {}, sizes {} from --dims or defaults)",
                    v.name,
                    v.shape,
                    sizes.join(", ")
                )
            };
            let n = limits.elements(&what(), &shape)?;
            total =
                total.saturating_add((n as u64).saturating_mul(held_bytes_per_element(v.dtype)));
            limits.run_bytes(&what(), total)?;
            Ok(shape)
        })
        .collect::<Result<Vec<_>>>()?;
    check_contract(decls, &shapes)?;
    Ok(shapes)
}

/// The contract inputs whose values are generated together.
const MASK: &str = "attention_mask";
const POSITIONS: &str = "position_ids";

/// Checks that `attention_mask` and `position_ids`, where declared, have the decoder
/// contract's form with these concrete `shapes`: integer, rank 2, the same batch, and
/// positions no wider than the mask (`[batch, current]` against `[batch, past + current]`).
pub fn check_contract(decls: &[ValueInfo], shapes: &[Vec<usize>]) -> Result<()> {
    let find = |name: &str| decls.iter().zip(shapes).find(|(v, _)| v.name == name);
    let form = |v: &ValueInfo, shape: &[usize], why: &str| {
        Error::Graph(format!(
            "input `{}` declares {} {} ({shape:?} with these sizes){why}; verify generates it \
             as the decoder contract's integer `attention_mask` [batch, past + current] and \
             `position_ids` [batch, current]",
            v.name, v.dtype, v.shape
        ))
    };
    for (v, shape) in [find(MASK), find(POSITIONS)].into_iter().flatten() {
        if v.dtype.is_float() || v.dtype == DType::Bool {
            return Err(form(v, shape, ", not integers"));
        }
        if shape.len() != 2 {
            return Err(form(v, shape, ", not of rank 2"));
        }
    }
    if let (Some((m, ms)), Some((p, ps))) = (find(MASK), find(POSITIONS)) {
        if ms[0] != ps[0] {
            return Err(form(
                p,
                ps,
                &format!(", a batch of {} where `{}` has {}", ps[0], m.name, ms[0]),
            ));
        }
        if ps[1] > ms[1] {
            return Err(form(
                p,
                ps,
                &format!(
                    ", {} positions where `{}` covers only {} tokens",
                    ps[1], m.name, ms[1]
                ),
            ));
        }
    }
    Ok(())
}

/// One attention-mask row of `width` columns whose last `current` columns are this call's tokens.
fn mask_row(width: usize, current: usize, padding: Padding, rng: &mut Rng) -> Vec<i64> {
    let pad = |rng: &mut Rng| rng.below(width as u64 / 2 + 1) as usize;
    match padding {
        Padding::None => vec![1; width],
        Padding::Left => {
            let p = pad(rng);
            (0..width).map(|j| (j >= p) as i64).collect()
        }
        // With a cache the row stays full (see [`Padding::Right`]).
        Padding::Right if current < width => vec![1; width],
        Padding::Right => {
            let p = pad(rng);
            (0..width).map(|j| (j < width - p) as i64).collect()
        }
    }
}

/// Positions of one mask row: the running count of tokens minus one; padding before the first
/// token takes position 0, padding after the last token continues counting (as
/// GroupQueryAttention rotates it).
fn positions(row: &[i64]) -> Vec<i64> {
    let mut next = 0i64;
    row.iter()
        .map(|&m| {
            if m == 0 && next == 0 {
                return 0;
            }
            next += 1;
            next - 1
        })
        .collect()
}

/// Random values for `decls` (shapes checked by [`checked_shapes`]; the mask and positions
/// are checked again here): token inputs below the vocabulary `vocab` reports, a mask padded
/// as `padding` says, positions derived from the mask, uniform floats in `[-1, 1)`.
pub fn fill_inputs(
    decls: &[ValueInfo],
    shapes: &[Vec<usize>],
    vocab: &dyn Fn(&str) -> Option<usize>,
    rng: &mut Rng,
    padding: Padding,
) -> Result<HashMap<String, Tensor>> {
    check_contract(decls, shapes)?;
    let shape_of = |name: &str| {
        decls
            .iter()
            .zip(shapes)
            .find(|(v, _)| v.name == name)
            .map(|(_, s)| s.clone())
    };
    let current = shape_of("input_ids")
        .or_else(|| shape_of("position_ids"))
        .and_then(|s| s.get(1).copied());
    // Rank 2 and integer, checked above: one row of `width` per batch entry.
    let mask: Option<(usize, Vec<i64>)> = shape_of(MASK).map(|s| {
        let (b, t) = (s[0], s[1]);
        let rows = (0..b)
            .flat_map(|_| mask_row(t, current.unwrap_or(t), padding, rng))
            .collect();
        (t, rows)
    });
    let mut out = HashMap::new();
    for (v, shape) in decls.iter().zip(shapes) {
        let n: usize = shape.iter().product();
        let t = match (v.dtype, &mask) {
            (_, Some((_, rows))) if v.name == MASK => {
                Tensor::int(v.dtype, shape.clone(), rows.clone())
            }
            _ if v.name == POSITIONS => {
                // Positions are at most as wide as the mask, in the same batch (checked above).
                let (b, s) = (shape[0], shape[1]);
                let values = (0..b)
                    .flat_map(|row| {
                        let p = match &mask {
                            Some((t, rows)) => positions(&rows[row * t..(row + 1) * t]),
                            None => (0..s as i64).collect(),
                        };
                        p[p.len() - s..].to_vec()
                    })
                    .collect();
                Tensor::int(v.dtype, shape.clone(), values)
            }
            (
                DType::I64
                | DType::I32
                | DType::U32
                | DType::U64
                | DType::I16
                | DType::U16
                | DType::I8
                | DType::U8,
                _,
            ) => {
                let hi = vocab(&v.name).unwrap_or(100) as u64;
                Tensor::int(
                    v.dtype,
                    shape.clone(),
                    (0..n).map(|_| rng.below(hi) as i64).collect(),
                )
            }
            (DType::Bool, _) => {
                Tensor::bool(shape.clone(), (0..n).map(|_| rng.below(2) == 1).collect())
            }
            (dtype, _) => Tensor::float(
                dtype,
                shape.clone(),
                (0..n).map(|_| (rng.unit() * 2.0 - 1.0) as f32).collect(),
            ),
        };
        out.insert(v.name.clone(), t);
    }
    Ok(out)
}

/// Random inputs for `graph`, consistent across inputs (mask ↔ positions ↔ cache lengths),
/// within the default budgets; `random_mask` pads masks on the left.
pub fn random_inputs(
    graph: &Graph,
    dims: &mut BTreeMap<String, usize>,
    rng: &mut Rng,
    random_mask: bool,
) -> Result<HashMap<String, Tensor>> {
    let shapes = checked_shapes(&graph.inputs, dims, &InterpLimits::default())?;
    let padding = if random_mask {
        Padding::Left
    } else {
        Padding::None
    };
    fill_inputs(
        &graph.inputs,
        &shapes,
        &|name| vocab_of(graph, name),
        rng,
        padding,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::Shape;

    fn decl(name: &str, dtype: DType, dims: &[&str]) -> ValueInfo {
        ValueInfo::new(name, dtype, Shape::new(dims.iter().copied()))
    }

    #[test]
    fn positions_follow_the_mask() {
        assert_eq!(positions(&[0, 0, 1, 1, 1]), vec![0, 0, 0, 1, 2]);
        assert_eq!(positions(&[1, 1, 1, 0, 0]), vec![0, 1, 2, 3, 4]);
        assert_eq!(positions(&[1, 1, 1]), vec![0, 1, 2]);
    }

    #[test]
    fn right_padding_pads_only_without_a_cache() {
        let mut rng = Rng::new(3);
        let rows: Vec<Vec<i64>> = (0..20)
            .map(|_| mask_row(8, 8, Padding::Right, &mut rng))
            .collect();
        assert!(rows.iter().any(|r| r.contains(&0)));
        for r in &rows {
            // Ones first, then zeros.
            assert!(r.windows(2).all(|w| w[0] >= w[1]), "{r:?}");
        }
        assert_eq!(mask_row(8, 5, Padding::Right, &mut rng), vec![1; 8]);
    }

    #[test]
    fn shapes_are_checked_before_allocating() {
        let limits = InterpLimits {
            max_tensor_elements: 1000,
            max_run_bytes: 1 << 20,
            ..InterpLimits::default()
        };
        let decls = [decl("input_ids", DType::I64, &["batch", "sequence_len"])];
        let mut dims = BTreeMap::from([("sequence_len".to_string(), 1usize << 40)]);
        let e = checked_shapes(&decls, &mut dims, &limits)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("input `input_ids`")
                && e.contains("sequence_len=1099511627776")
                && e.contains("--max-tensor-elements"),
            "{e}"
        );
        // Sums saturate instead of wrapping.
        let decls = [decl("m", DType::I64, &["a + b"])];
        let mut dims = BTreeMap::from([("a".to_string(), usize::MAX), ("b".to_string(), 2)]);
        let e = checked_shapes(&decls, &mut dims, &limits).unwrap_err();
        assert!(
            matches!(&e, Error::Limit(m) if m.contains("input `m`")
                && m.contains(&format!("[{}]", usize::MAX))
                && m.contains("--max-tensor-elements")),
            "{e}"
        );
        // Together over the run's memory.
        let decls = [decl("x", DType::F32, &["n"]), decl("y", DType::F32, &["n"])];
        let mut dims = BTreeMap::from([("n".to_string(), 1000usize)]);
        let tight = InterpLimits {
            max_tensor_elements: 1000,
            max_run_bytes: 6000,
            ..InterpLimits::default()
        };
        let e = checked_shapes(&decls, &mut dims, &tight)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("input `y`") && e.contains("--max-memory-mib"),
            "{e}"
        );
    }

    /// The error `checked_shapes` gives for `decls` with `dims`.
    fn refused(decls: &[ValueInfo], dims: &[(&str, usize)]) -> String {
        let mut dims = dims.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        let e = checked_shapes(decls, &mut dims, &InterpLimits::default()).unwrap_err();
        assert!(matches!(e, Error::Graph(_)), "{e:?}");
        e.to_string()
    }

    #[test]
    fn mask_and_positions_must_have_the_contract_form() {
        let mask = |dims: &[&str]| decl("attention_mask", DType::I64, dims);
        let positions = |dims: &[&str]| decl("position_ids", DType::I64, dims);
        // Positions wider than the mask (index out of bounds before).
        let e = refused(
            &[mask(&["b", "t"]), positions(&["b", "s"])],
            &[("t", 2), ("s", 7)],
        );
        assert!(
            e.contains("input `position_ids`")
                && e.contains("7 positions where `attention_mask` covers only 2 tokens"),
            "{e}"
        );
        // Another batch.
        let e = refused(&[mask(&["b", "t"]), positions(&["c", "t"])], &[("c", 2)]);
        assert!(
            e.contains("input `position_ids`") && e.contains("a batch of 2 where"),
            "{e}"
        );
        // Rank 3, rank 1.
        for bad in [mask(&["b", "t", "u"]), positions(&["s"])] {
            let name = bad.name.clone();
            let e = refused(&[bad], &[]);
            assert!(
                e.contains(&format!("input `{name}`")) && e.contains("not of rank 2"),
                "{e}"
            );
        }
        // Floats and booleans.
        for dtype in [DType::F32, DType::Bool] {
            let e = refused(&[decl("attention_mask", dtype, &["b", "t"])], &[]);
            assert!(
                e.contains("input `attention_mask`") && e.contains("not integers"),
                "{e}"
            );
        }
        // The contract's own form is generated consistently.
        let decls = [
            mask(&["batch", "past_seq_len + seq_len"]),
            positions(&["batch", "sequence_len"]),
        ];
        let mut dims = BTreeMap::from([("batch".to_string(), 2)]);
        let shapes = checked_shapes(&decls, &mut dims, &InterpLimits::default()).unwrap();
        let values =
            fill_inputs(&decls, &shapes, &|_| None, &mut Rng::new(1), Padding::Left).unwrap();
        assert_eq!(values["attention_mask"].shape, vec![2, 10]);
        assert_eq!(values["position_ids"].ints().unwrap().len(), 14);
    }

    #[test]
    fn negative_fixed_sizes_are_refused() {
        let decls = [ValueInfo {
            name: "x".into(),
            dtype: DType::F32,
            shape: Shape(vec![Dim::Fixed(2), Dim::Fixed(-3)]),
        }];
        let e = refused(&decls, &[]);
        assert!(
            e.contains("input `x`") && e.contains("negative size -3"),
            "{e}"
        );
    }
}
