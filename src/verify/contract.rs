//! Which inputs two models take, and whether they can be fed the same tensors.
//!
//! Inputs both models declare must agree in dtype and shape (fixed sizes equal; a named size
//! takes one value across both models). One input may be missing on one side: `position_ids`,
//! when both take `attention_mask` — a GroupQueryAttention build computes positions from the
//! mask, so the other model is fed positions derived from it (see [`super::inputs`]). Any
//! other difference is refused, naming the input and both declarations.

use std::collections::BTreeMap;

use crate::interp::inputs::{canonical_dim, dim_value};
use crate::ir::{Dim, Graph, ValueInfo};
use crate::{Error, Result};

/// The contract input a model may compute itself from `attention_mask`.
const DERIVABLE: &str = "position_ids";

/// The inputs to generate for two models.
#[derive(Debug, Clone)]
pub struct Reconciled {
    /// Declarations of every input either model takes (the reference's first).
    pub decls: Vec<ValueInfo>,
    /// One line per input only one model takes, saying how its values are derived.
    pub derived: Vec<String>,
}

/// Whether `graph` runs `com.microsoft::GroupQueryAttention` (which expects right padding).
pub fn has_gqa(graph: &Graph) -> bool {
    graph
        .nodes
        .iter()
        .any(|n| n.domain == "com.microsoft" && n.op_type == "GroupQueryAttention")
}

fn describe(v: &ValueInfo) -> String {
    format!("{} {}", v.dtype, v.shape)
}

/// Reconciles the inputs of `reference` and `candidate`, pinning named sizes in `dims` (which
/// holds the user's sizes) so that both models' shapes are the same concrete shapes.
pub fn reconcile(
    reference: &Graph,
    candidate: &Graph,
    dims: &mut BTreeMap<String, usize>,
) -> Result<Reconciled> {
    let find = |g: &Graph, name: &str| g.inputs.iter().find(|v| v.name == name).cloned();
    let mismatch = |a: &ValueInfo, b: &ValueInfo, why: &str| {
        Error::Graph(format!(
            "input `{}`: the reference declares {}, the candidate declares {}{why}; the models \
             take different inputs",
            a.name,
            describe(a),
            describe(b)
        ))
    };
    let pairs: Vec<(ValueInfo, ValueInfo)> = reference
        .inputs
        .iter()
        .filter_map(|a| find(candidate, &a.name).map(|b| (a.clone(), b)))
        .collect();
    for (a, b) in &pairs {
        if a.dtype != b.dtype || a.shape.0.len() != b.shape.0.len() {
            return Err(mismatch(a, b, ""));
        }
    }
    // A named size facing a fixed one takes that size (unless --dims says otherwise).
    for (a, b) in &pairs {
        for (x, y) in a.shape.0.iter().zip(&b.shape.0) {
            match (x, y) {
                (Dim::Fixed(m), Dim::Fixed(n)) if m != n => return Err(mismatch(a, b, "")),
                (Dim::Sym(s), Dim::Fixed(n)) | (Dim::Fixed(n), Dim::Sym(s))
                    if is_single(s) && *n >= 0 =>
                {
                    let name = canonical_dim(s.trim()).to_string();
                    let n = *n as usize;
                    match dims.get(&name) {
                        Some(&v) if v != n => {
                            return Err(mismatch(a, b, &format!(" and {name} is {v}")))
                        }
                        _ => dims.insert(name, n),
                    };
                }
                _ => {}
            }
        }
    }
    // The reference's shapes fix every size it names; the candidate's names must agree.
    let concrete: Vec<Vec<usize>> = pairs
        .iter()
        .map(|(a, _)| a.shape.0.iter().map(|d| dim_value(d, dims)).collect())
        .collect();
    for ((a, b), shape) in pairs.iter().zip(&concrete) {
        for (y, &size) in b.shape.0.iter().zip(shape) {
            let agrees = match y {
                Dim::Sym(s) if s.trim().is_empty() => true,
                Dim::Sym(s) if is_single(s) => {
                    let name = canonical_dim(s.trim()).to_string();
                    *dims.entry(name).or_insert(size) == size
                }
                other => dim_value(other, dims) == size,
            };
            if !agrees {
                let sizes: Vec<String> = dims.iter().map(|(k, v)| format!("{k}={v}")).collect();
                return Err(mismatch(
                    a,
                    b,
                    &format!(" (with {} they differ)", sizes.join(", ")),
                ));
            }
        }
    }
    let mut decls = reference.inputs.clone();
    let mut derived = Vec::new();
    for (only, other, side, lacking) in [
        (reference, candidate, "reference", "candidate"),
        (candidate, reference, "candidate", "reference"),
    ] {
        for v in only
            .inputs
            .iter()
            .filter(|v| find(other, &v.name).is_none())
        {
            let both_have_mask = find(reference, "attention_mask").is_some()
                && find(candidate, "attention_mask").is_some();
            if v.name != DERIVABLE || !both_have_mask {
                let hint = if v.name == DERIVABLE {
                    " (it is derived only when both take attention_mask)"
                } else {
                    ""
                };
                return Err(Error::Graph(format!(
                    "input `{}`: the {side} declares {}, the {lacking} does not take it{hint}; \
                     the models take different inputs",
                    v.name,
                    describe(v)
                )));
            }
            derived.push(format!(
                "{} ({lacking} lacks it: positions from attention_mask)",
                v.name
            ));
            if side == "candidate" {
                decls.push(v.clone());
            }
        }
    }
    Ok(Reconciled { decls, derived })
}

/// Whether a symbolic dim is one name (not a sum, not unnamed).
fn is_single(s: &str) -> bool {
    !s.trim().is_empty() && !s.contains(" + ")
}

/// Every size name the inputs of `graphs` use (canonical spelling).
pub fn dim_names(graphs: &[&Graph]) -> Vec<String> {
    let mut names: Vec<String> = graphs
        .iter()
        .flat_map(|g| &g.inputs)
        .flat_map(|v| &v.shape.0)
        .filter_map(|d| match d {
            Dim::Sym(s) => Some(s.split(" + ").map(|t| canonical_dim(t.trim()).to_string())),
            Dim::Fixed(_) => None,
        })
        .flatten()
        .filter(|n| !n.is_empty())
        .collect();
    names.sort();
    names.dedup();
    names
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{DType, Shape};

    fn decl(name: &str, dtype: DType, dims: Vec<Dim>) -> ValueInfo {
        ValueInfo::new(name, dtype, Shape(dims))
    }

    fn graph(inputs: Vec<ValueInfo>) -> Graph {
        Graph {
            inputs,
            ..Graph::default()
        }
    }

    fn sym(s: &str) -> Dim {
        Dim::sym(s)
    }

    fn decoder(with_positions: bool) -> Graph {
        let mut inputs = vec![
            decl(
                "input_ids",
                DType::I64,
                vec![sym("batch"), sym("sequence_len")],
            ),
            decl(
                "attention_mask",
                DType::I64,
                vec![sym("batch"), sym("past_seq_len + seq_len")],
            ),
        ];
        if with_positions {
            inputs.push(decl(
                "position_ids",
                DType::I64,
                vec![sym("batch"), sym("sequence_len")],
            ));
        }
        graph(inputs)
    }

    #[test]
    fn position_ids_may_be_missing_on_either_side() {
        let mut dims = BTreeMap::new();
        let r = reconcile(&decoder(true), &decoder(false), &mut dims).unwrap();
        assert_eq!(r.decls.len(), 3);
        assert_eq!(
            r.derived,
            vec!["position_ids (candidate lacks it: positions from attention_mask)"]
        );
        let r = reconcile(&decoder(false), &decoder(true), &mut dims).unwrap();
        assert_eq!(r.decls.last().unwrap().name, "position_ids");
        assert!(r.derived[0].contains("reference lacks it"));
    }

    #[test]
    fn other_differences_are_refused_naming_both_declarations() {
        let a = graph(vec![decl(
            "x",
            DType::F32,
            vec![sym("batch"), Dim::Fixed(7)],
        )]);
        for b in [
            graph(vec![decl(
                "x",
                DType::F16,
                vec![sym("batch"), Dim::Fixed(7)],
            )]),
            graph(vec![decl(
                "x",
                DType::F32,
                vec![sym("batch"), Dim::Fixed(5)],
            )]),
            graph(vec![decl("x", DType::F32, vec![sym("batch")])]),
            graph(vec![decl(
                "y",
                DType::F32,
                vec![sym("batch"), Dim::Fixed(7)],
            )]),
        ] {
            let e = reconcile(&a, &b, &mut BTreeMap::new())
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("different inputs") && e.contains("input `"),
                "{e}"
            );
        }
        let b = graph(vec![decl(
            "x",
            DType::F32,
            vec![sym("batch"), Dim::Fixed(5)],
        )]);
        let e = reconcile(&a, &b, &mut BTreeMap::new())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("f32 [batch, 7]") && e.contains("f32 [batch, 5]"),
            "{e}"
        );
        // position_ids without a mask on both sides cannot be derived.
        let mut no_mask = decoder(true);
        no_mask.inputs.remove(1);
        let e = reconcile(&no_mask, &decoder(false), &mut BTreeMap::new())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("input `position_ids`") && e.contains("only when both take attention_mask"),
            "{e}"
        );
    }

    #[test]
    fn named_sizes_unify_with_fixed_sizes_and_other_names() {
        let a = graph(vec![
            decl("x", DType::F32, vec![sym("batch"), sym("n")]),
            decl("y", DType::F32, vec![sym("n")]),
        ]);
        let b = graph(vec![
            decl("x", DType::F32, vec![sym("b"), Dim::Fixed(4)]),
            decl("y", DType::F32, vec![sym("m")]),
        ]);
        let mut dims = BTreeMap::new();
        reconcile(&a, &b, &mut dims).unwrap();
        assert_eq!(dims["n"], 4);
        assert_eq!(dims["m"], 4);
        assert_eq!(dims["b"], dims["batch"]);
        // The same name bound to two different fixed sizes cannot be the same.
        let c = graph(vec![
            decl("x", DType::F32, vec![sym("batch"), Dim::Fixed(4)]),
            decl("y", DType::F32, vec![Dim::Fixed(5)]),
        ]);
        let e = reconcile(&a, &c, &mut BTreeMap::new())
            .unwrap_err()
            .to_string();
        assert!(e.contains("input `y`") && e.contains("n is 4"), "{e}");
        // --dims that contradict a fixed size.
        let mut dims = BTreeMap::from([("n".to_string(), 9)]);
        let e = reconcile(&a, &b, &mut dims).unwrap_err().to_string();
        assert!(e.contains("input `x`") && e.contains("n is 9"), "{e}");
    }
}
