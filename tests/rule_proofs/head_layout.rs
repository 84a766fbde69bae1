//! Proofs of the head-layout rules (`rewrites/recognize/head_layout.rules`) on the default EP
//! (which runs Attention and RotaryEmbedding), and the near misses they must leave alone.
//!
//! A case is what exporters write: 3-D projections split into heads
//! (`Transpose(Reshape(x, [B, S, H, D]), [0, 2, 1, 3])`, the target constant, with 0s and −1, or
//! computed from `Shape(x)`), the 4-D op, and its output merged back to `[B, S, H·D]`. The
//! rotary and attention rules are proven together with `heads-merged-back` (which then removes
//! the views around their 3-D results); mutation testing removes the rule under proof only.

use std::collections::HashMap;

use mobius::ir::{Attr, DType, Dim, Graph, GraphBuilder, Shape};
use mobius::ops::Tensor;
use proptest::prelude::*;

use super::{feeds_sized, optimize_with_rules, prove_with, rule, rules_for};

/// How a Reshape target is written.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Target {
    /// Every dim a number (static batch and sequence only).
    Explicit,
    /// `0` for batch and sequence (copied from the input).
    Zeros,
    /// Batch and sequence read with `Shape(x; start, end)` and concatenated, as the dynamo
    /// exporter writes it.
    Computed,
}

fn target(symbolic: bool) -> impl Strategy<Value = Target> {
    if symbolic {
        prop_oneof![Just(Target::Zeros), Just(Target::Computed)].boxed()
    } else {
        prop_oneof![
            Just(Target::Explicit),
            Just(Target::Zeros),
            Just(Target::Computed)
        ]
        .boxed()
    }
}

/// Batch, sequence and whether both are named (`batch`, `seq`) in the graph's shapes.
#[derive(Debug, Clone, Copy)]
struct Rows {
    batch: usize,
    seq: usize,
    symbolic: bool,
}

impl Rows {
    /// The Reshape target written as the `i`-th way these rows allow (0: explicit where the
    /// rows are static, else zeros; 1: zeros; 2: computed).
    fn target(&self, i: usize) -> Target {
        match i {
            0 if !self.symbolic => Target::Explicit,
            0 | 1 => Target::Zeros,
            _ => Target::Computed,
        }
    }

    /// `[B, S, rest…]` as a graph shape.
    fn shape(&self, rest: &[usize]) -> Shape {
        let (b, s) = if self.symbolic {
            (Dim::Sym("batch".into()), Dim::Sym("seq".into()))
        } else {
            (Dim::Fixed(self.batch as i64), Dim::Fixed(self.seq as i64))
        };
        Shape(
            [b, s]
                .into_iter()
                .chain(rest.iter().map(|&d| Dim::Fixed(d as i64)))
                .collect(),
        )
    }
}

/// The target `[B, S] ++ tail` written as `how` (`x` is the tensor whose `B` and `S` a
/// computed target reads).
fn reshape_target(b: &mut GraphBuilder, x: &str, how: Target, rows: Rows, tail: &[i64]) -> String {
    match how {
        Target::Explicit => {
            let mut v = vec![rows.batch as i64, rows.seq as i64];
            v.extend(tail);
            b.const_i64(&v)
        }
        Target::Zeros => {
            let mut v = vec![0, 0];
            v.extend(tail);
            b.const_i64(&v)
        }
        Target::Computed => {
            let part = |b: &mut GraphBuilder, start: i64, end: i64| {
                b.op(
                    "Shape",
                    &[x],
                    vec![("start", Attr::Int(start)), ("end", Attr::Int(end))],
                )
            };
            let (batch, seq) = (part(b, 0, 1), part(b, 1, 2));
            let tail = b.const_i64(tail);
            b.op(
                "Concat",
                &[&batch, &seq, &tail],
                vec![("axis", Attr::Int(0))],
            )
        }
    }
}

/// `Transpose(Reshape(x, [B, S, H or −1, D]), perm)`.
#[allow(clippy::too_many_arguments)]
fn view(
    b: &mut GraphBuilder,
    x: &str,
    how: Target,
    rows: Rows,
    heads: usize,
    minus: bool,
    head_dim: usize,
    perm: &[i64],
) -> String {
    let h = if minus { -1 } else { heads as i64 };
    let shape = reshape_target(b, x, how, rows, &[h, head_dim as i64]);
    let split = b.op("Reshape", &[x, &shape], vec![]);
    b.op(
        "Transpose",
        &[&split],
        vec![("perm", Attr::Ints(perm.to_vec()))],
    )
}

/// `Reshape(Transpose(y, [0, 2, 1, 3]), [B, S, width])` into the output `out` (`like` is a
/// 3-D tensor with y's batch and sequence, for a computed target).
fn merge(
    b: &mut GraphBuilder,
    y: &str,
    like: &str,
    how: Target,
    rows: Rows,
    width: usize,
    out: &str,
) {
    let back = b.op(
        "Transpose",
        &[y],
        vec![("perm", Attr::Ints(vec![0, 2, 1, 3]))],
    );
    let tail = if how == Target::Explicit {
        width as i64
    } else {
        -1
    };
    let shape = reshape_target(b, like, how, rows, &[tail]);
    b.op_into("Reshape", &[&back, &shape], vec![], out);
}

/// Random values for every input of `g`, the named dims `batch` and `seq` as `rows` gives
/// them and `total` (keys with the cache) as `total`.
fn inputs(g: &Graph, rows: Rows, total: usize, seed: u64) -> HashMap<String, Tensor> {
    let size = |s: &str| match s {
        "batch" => rows.batch,
        "total" => total,
        _ => rows.seq,
    };
    feeds_sized(g, size, seed)
}

/// Proves `name` on `g` together with `heads-merged-back` (see the module doc), exactly.
fn prove_merged(
    name: &str,
    g: Graph,
    values: HashMap<String, Tensor>,
) -> Result<(), TestCaseError> {
    let mut rules = rules_for(name);
    rules.push(rule("heads-merged-back"));
    prove_with(&rule(name), rules, "default", g, values, 0.0)
}

/// One rotary case.
#[derive(Debug, Clone, Copy)]
struct RotaryCase {
    rows: Rows,
    heads: usize,
    head_dim: usize,
    /// `rotary_embedding_dim` (0: unset).
    rotary_dim: usize,
    interleaved: bool,
    /// `num_heads` set (to the view's heads) on the 4-D op.
    num_heads: bool,
    split: Target,
    merge: Target,
    minus: bool,
}

fn rotary_case() -> impl Strategy<Value = RotaryCase> {
    (1usize..3, 1usize..4, any::<bool>(), 1usize..4, 1usize..5)
        .prop_flat_map(|(batch, seq, symbolic, heads, half)| {
            (
                Just((
                    Rows {
                        batch,
                        seq,
                        symbolic,
                    },
                    heads,
                    2 * half,
                )),
                prop_oneof![Just(0usize), (1..=half).prop_map(|r| 2 * r)],
                (any::<bool>(), any::<bool>(), any::<bool>()),
                (target(symbolic), target(symbolic)),
            )
        })
        .prop_map(
            |(
                (rows, heads, head_dim),
                rotary_dim,
                (interleaved, num_heads, minus),
                (split, merge),
            )| {
                RotaryCase {
                    rows,
                    heads,
                    head_dim,
                    rotary_dim,
                    interleaved,
                    num_heads,
                    split,
                    merge,
                    minus,
                }
            },
        )
}

/// `x` `[B, S, H·D]` → view (through `perm`, split as `split`, or `[S, B, H, D]` when
/// `swap_rows`) → RotaryEmbedding (`num_heads` as given) → merged back into `y`; caches `cos`,
/// `sin` `[B, S', rd/2]` inputs (`S'` the rotated tensor's sequence axis).
fn rotary_graph(c: &RotaryCase, perm: &[i64], swap_rows: bool, num_heads: Option<i64>) -> Graph {
    let (h, d) = (c.heads, c.head_dim);
    let mut b = GraphBuilder::new("g");
    let x = b.input("x", DType::F32, c.rows.shape(&[h * d]));
    // The caches follow the rotated tensor: [B, S, D/2] for a head view, [S, B, D/2] for rows
    // split the other way, [B, D, S/2] for a view through [0, 2, 3, 1] (its sequence axis is
    // D, its head axis S).
    let half = if c.rotary_dim == 0 { d } else { c.rotary_dim } / 2;
    let (batch, seq) = (c.rows.batch as i64, c.rows.seq as i64);
    let caches = match (perm == [0, 2, 1, 3], swap_rows) {
        (true, false) => c.rows.shape(&[half]),
        (true, true) => Shape::new([seq, batch, half as i64]),
        (false, _) => Shape::new([batch, d as i64, seq / 2]),
    };
    let cos = b.input("cos", DType::F32, caches.clone());
    let sin = b.input("sin", DType::F32, caches);
    let v = if swap_rows {
        let shape = b.const_i64(&[c.rows.seq as i64, c.rows.batch as i64, h as i64, d as i64]);
        let split = b.op("Reshape", &[&x, &shape], vec![]);
        b.op(
            "Transpose",
            &[&split],
            vec![("perm", Attr::Ints(perm.to_vec()))],
        )
    } else {
        view(&mut b, &x, c.split, c.rows, h, c.minus, d, perm)
    };
    let mut attrs = vec![("interleaved", Attr::Int(c.interleaved as i64))];
    if c.rotary_dim > 0 {
        attrs.push(("rotary_embedding_dim", Attr::Int(c.rotary_dim as i64)));
    }
    if let Some(n) = num_heads {
        attrs.push(("num_heads", Attr::Int(n)));
    }
    let rotated = b.op("RotaryEmbedding", &[&v, &cos, &sin], attrs);
    if perm == [0, 2, 1, 3] {
        b.output("y", DType::F32, c.rows.shape(&[h * d]));
        merge(&mut b, &rotated, &x, c.merge, c.rows, h * d, "y");
    } else {
        b.output(
            "y",
            DType::F32,
            Shape::new([c.rows.batch as i64, h as i64, d as i64, c.rows.seq as i64]),
        );
        b.op_into("Identity", &[&rotated], vec![], "y");
    }
    b.finish()
}

/// One attention case.
#[derive(Debug, Clone)]
struct AttentionCase {
    rows: Rows,
    /// New keys and values (the query's sequence when there is a cache).
    kv_seq: usize,
    past: Option<usize>,
    kv_heads: usize,
    n_rep: usize,
    head_dim: usize,
    v_head_dim: usize,
    /// The mask shape: `[S, T]`, `[B, 1, S, T]`, `[1, Hq, S, T]` or `[B, Hq, S, T]`.
    mask: usize,
    causal: bool,
    scale: Option<f32>,
    /// `q_num_heads`/`kv_num_heads` set on the 4-D op.
    head_attrs: bool,
    split: Target,
    merge: Target,
    minus: bool,
}

fn attention_case() -> impl Strategy<Value = AttentionCase> {
    (
        (
            1usize..3,
            1usize..4,
            any::<bool>(),
            1usize..4,
            prop::option::of(0usize..4),
        ),
        (1usize..3, 1usize..3, 1usize..5, 1usize..5),
        (
            0usize..4,
            any::<bool>(),
            prop::option::of(0.1f32..1.0),
            any::<bool>(),
            any::<bool>(),
        ),
    )
        .prop_flat_map(|(rows, heads, attrs)| {
            let symbolic = rows.2;
            (
                Just((rows, heads, attrs)),
                target(symbolic),
                target(symbolic),
            )
        })
        .prop_map(
            |(
                (
                    (batch, seq, symbolic, kv_seq, past),
                    (kv_heads, n_rep, head_dim, v_head_dim),
                    (mask, causal, scale, head_attrs, minus),
                ),
                split,
                merge,
            )| AttentionCase {
                rows: Rows {
                    batch,
                    seq,
                    symbolic,
                },
                // With a cache (and whenever names are symbolic), keys come with the queries.
                kv_seq: if past.is_some() || symbolic {
                    seq
                } else {
                    kv_seq
                },
                past,
                kv_heads,
                n_rep,
                head_dim,
                v_head_dim,
                mask,
                causal,
                scale,
                head_attrs,
                split,
                merge,
                minus,
            },
        )
}

/// q `[B, S, Hq·D]`, k `[B, L, Hkv·D]`, v `[B, L, Hkv·Dv]` → views → 4-D Attention (with
/// `q_num_heads` `q_heads_attr` when given) → y merged back to `[B, S, Hq·Dv]`; with a cache,
/// the presents as outputs.
fn attention_graph(c: &AttentionCase, q_heads_attr: Option<i64>) -> Graph {
    let (hkv, d, dv) = (c.kv_heads, c.head_dim, c.v_head_dim);
    let hq = hkv * c.n_rep;
    let rows = c.rows;
    let kv_rows = Rows {
        seq: c.kv_seq,
        ..rows
    };
    let total = c.past.unwrap_or(0) + c.kv_seq;
    let mut b = GraphBuilder::new("g");
    let q3 = b.input("q", DType::F32, rows.shape(&[hq * d]));
    let k3 = b.input("k", DType::F32, kv_rows.shape(&[hkv * d]));
    let v3 = b.input("v", DType::F32, kv_rows.shape(&[hkv * dv]));
    let t = match (rows.symbolic, c.past) {
        (false, _) => Dim::Fixed(total as i64),
        (true, None) => Dim::Sym("seq".into()),
        (true, Some(_)) => Dim::Sym("total".into()),
    };
    let s_dim = rows.shape(&[]).0[1].clone();
    let b_dim = b_of(rows);
    let mask_shape = match c.mask {
        0 => vec![s_dim, t],
        1 => vec![b_dim, Dim::Fixed(1), s_dim, t],
        2 => vec![Dim::Fixed(1), Dim::Fixed(hq as i64), s_dim, t],
        _ => vec![b_dim, Dim::Fixed(hq as i64), s_dim, t],
    };
    let mask = b.input("mask", DType::F32, Shape(mask_shape));
    let qv = view(&mut b, &q3, c.split, rows, hq, c.minus, d, &[0, 2, 1, 3]);
    let kv = view(
        &mut b,
        &k3,
        c.split,
        kv_rows,
        hkv,
        c.minus,
        d,
        &[0, 2, 1, 3],
    );
    let vv = view(
        &mut b,
        &v3,
        c.split,
        kv_rows,
        hkv,
        c.minus,
        dv,
        &[0, 2, 1, 3],
    );
    let mut attrs = vec![("is_causal", Attr::Int(c.causal as i64))];
    if let Some(s) = c.scale {
        attrs.push(("scale", Attr::Float(s)));
    }
    if c.head_attrs {
        attrs.push(("kv_num_heads", Attr::Int(hkv as i64)));
    }
    if let Some(h) = q_heads_attr.or(c.head_attrs.then_some(hq as i64)) {
        attrs.push(("q_num_heads", Attr::Int(h)));
    }
    let y4 = b.fresh_name("Attention");
    match c.past {
        Some(p) => {
            let cache = |t: Dim, width: usize| {
                let (h, w) = (Dim::Fixed(hkv as i64), Dim::Fixed(width as i64));
                Shape(vec![b_of(rows), h, t, w])
            };
            let present = if rows.symbolic {
                Dim::Sym(format!("{p} + seq"))
            } else {
                Dim::Fixed(total as i64)
            };
            let pk = b.input("past_key", DType::F32, cache(Dim::Fixed(p as i64), d));
            let pv = b.input("past_value", DType::F32, cache(Dim::Fixed(p as i64), dv));
            b.output("present_key", DType::F32, cache(present.clone(), d));
            b.output("present_value", DType::F32, cache(present, dv));
            b.node(
                "",
                "Attention",
                &[&qv, &kv, &vv, &mask, &pk, &pv],
                attrs,
                vec![y4.clone(), "present_key".into(), "present_value".into()],
            );
        }
        None => b.node(
            "",
            "Attention",
            &[&qv, &kv, &vv, &mask],
            attrs,
            vec![y4.clone()],
        ),
    }
    b.output("y", DType::F32, rows.shape(&[hq * dv]));
    merge(&mut b, &y4, &q3, c.merge, rows, hq * dv, "y");
    b.finish()
}

/// The batch dim of `rows`' graph shapes.
fn b_of(rows: Rows) -> Dim {
    rows.shape(&[]).0[0].clone()
}

/// The rule that rewrites attention case `c`.
fn attention_rule(c: &AttentionCase) -> &'static str {
    if c.past.is_some() {
        "attention-on-3d-heads"
    } else {
        "attention-on-3d-heads-without-cache"
    }
}

/// One merge-back case: `[B, S, H·D]` split, transposed by `perm` and back by its inverse.
type MergeCase = (Rows, usize, usize, Vec<i64>, Target, Target, bool, u64);

fn merge_case() -> impl Strategy<Value = MergeCase> {
    (1usize..3, 1usize..4, any::<bool>(), 1usize..4, 1usize..4)
        .prop_flat_map(|(batch, seq, symbolic, heads, head_dim)| {
            (
                Just((
                    Rows {
                        batch,
                        seq,
                        symbolic,
                    },
                    heads,
                    head_dim,
                )),
                Just(vec![0i64, 1, 2, 3]).prop_shuffle(),
                target(symbolic),
                target(symbolic),
                any::<bool>(),
                any::<u64>(),
            )
        })
        .prop_map(|((rows, h, d), perm, split, merge, minus, seed)| {
            (rows, h, d, perm, split, merge, minus, seed)
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn rotary_on_3d_heads(c in rotary_case(), seed in any::<u64>()) {
        let g = rotary_graph(&c, &[0, 2, 1, 3], false, c.num_heads.then_some(c.heads as i64));
        let values = inputs(&g, c.rows, 0, seed);
        prove_merged("rotary-on-3d-heads", g, values)?;
    }

    #[test]
    fn attention_on_3d_heads(mut c in attention_case(), past in 0usize..4, seed in any::<u64>()) {
        c.past = Some(past);
        c.kv_seq = c.rows.seq;
        let g = attention_graph(&c, None);
        let values = inputs(&g, c.rows, c.past.unwrap_or(0) + c.kv_seq, seed);
        prove_merged(attention_rule(&c), g, values)?;
    }

    #[test]
    fn attention_on_3d_heads_without_cache(mut c in attention_case(), seed in any::<u64>()) {
        c.past = None;
        let g = attention_graph(&c, None);
        let values = inputs(&g, c.rows, c.past.unwrap_or(0) + c.kv_seq, seed);
        prove_merged(attention_rule(&c), g, values)?;
    }

    #[test]
    fn heads_merged_back((rows, h, d, perm, split, how, minus, seed) in merge_case()) {
        let mut b = GraphBuilder::new("g");
        let x = b.input("x", DType::F32, rows.shape(&[h * d]));
        let viewed = view(&mut b, &x, split, rows, h, minus, d, &perm);
        let mut inverse = vec![0i64; 4];
        for (i, &p) in perm.iter().enumerate() {
            inverse[p as usize] = i as i64;
        }
        let back = b.op("Transpose", &[&viewed], vec![("perm", Attr::Ints(inverse))]);
        let tail = if how == Target::Explicit { (h * d) as i64 } else { -1 };
        let shape = reshape_target(&mut b, &x, how, rows, &[tail]);
        b.output("y", DType::F32, rows.shape(&[h * d]));
        b.op_into("Reshape", &[&back, &shape], vec![], "y");
        let g = b.finish();
        let values = inputs(&g, rows, 0, seed);
        prove_with(&rule("heads-merged-back"), rules_for("heads-merged-back"), "default", g, values, 0.0)?;
    }

    #[test]
    fn split_then_reshaped((rows, h, d, perm, split, _how, minus, seed) in merge_case(), flat in 0usize..3) {
        // Split, transposed and back, then reshaped to [B·S, H·D] ([−1, H·D]), [B, S·H·D]
        // ([0, −1], 0 copying B) or [B·S·H·D] ([−1]); named rows give named products.
        let mut b = GraphBuilder::new("g");
        let x = b.input("x", DType::F32, rows.shape(&[h * d]));
        let viewed = view(&mut b, &x, split, rows, h, minus, d, &perm);
        let mut inverse = vec![0i64; 4];
        for (i, &p) in perm.iter().enumerate() {
            inverse[p as usize] = i as i64;
        }
        let back = b.op("Transpose", &[&viewed], vec![("perm", Attr::Ints(inverse))]);
        let n = (h * d) as i64;
        let [batch, seq] = [rows.batch, rows.seq].map(|v| v as i64);
        let dim = |v: i64, name: String| if rows.symbolic { Dim::Sym(name) } else { Dim::Fixed(v) };
        let (target, out) = match flat {
            0 => (vec![-1, n], vec![dim(batch * seq, "batch*seq".into()), Dim::Fixed(n)]),
            1 => (vec![0, -1], vec![rows.shape(&[]).0[0].clone(), dim(seq * n, format!("{n}*seq"))]),
            _ => (vec![-1], vec![dim(batch * seq * n, format!("{n}*batch*seq"))]),
        };
        let out = Shape(out);
        let shape = b.const_i64(&target);
        b.output("y", DType::F32, out);
        b.op_into("Reshape", &[&back, &shape], vec![], "y");
        let g = b.finish();
        let values = inputs(&g, rows, 0, seed);
        prove_with(&rule("split-then-reshaped"), rules_for("split-then-reshaped"), "default", g, values, 0.0)?;
    }
}

/// `g` optimized with all rules for the default EP.
fn optimized(g: &Graph) -> Graph {
    let rules = mobius::rulebook::rules().unwrap().rules;
    let (out, _) = optimize_with_rules(
        &super::model(g.clone()),
        &mobius::ep::get_ep("default").unwrap(),
        &super::options(None),
        &rules,
    )
    .unwrap();
    out.graph
}

/// Whether the first input of every `op` node of `g` is a Transpose's output (the op still
/// reads a 4-D view).
fn reads_views(g: &Graph, op: &str) -> bool {
    let transposed = |name: &str| {
        g.nodes
            .iter()
            .any(|n| n.op_type == "Transpose" && n.outputs.iter().any(|o| o == name))
    };
    let mut nodes = g.nodes.iter().filter(|n| n.op_type == op).peekable();
    nodes.peek().is_some() && nodes.all(|n| transposed(&n.inputs[0]))
}

/// `a` and `b` agree exactly on random inputs (through the interpreter).
fn assert_same_values(a: &Graph, b: &Graph, rows: Rows) {
    let feeds = inputs(a, rows, 0, 11);
    let run = |g: &Graph| {
        let mut weights = mobius::weights::eval::Evaluator::new(None);
        mobius::interp::run_graph(g, &feeds, &mut weights).unwrap()
    };
    let (want, got) = (run(a), run(b));
    for (name, x) in &want {
        assert_eq!(x.as_f64(), got[name].as_f64(), "{name}");
    }
}

fn base_rotary() -> RotaryCase {
    RotaryCase {
        rows: Rows {
            batch: 2,
            seq: 4,
            symbolic: false,
        },
        heads: 2,
        head_dim: 4,
        rotary_dim: 0,
        interleaved: false,
        num_heads: false,
        split: Target::Computed,
        merge: Target::Computed,
        minus: true,
    }
}

#[test]
fn rotary_near_misses_keep_their_views() {
    let c = base_rotary();
    let g = rotary_graph(&c, &[0, 2, 1, 3], false, None);
    let out = optimized(&g);
    assert!(
        !reads_views(&out, "RotaryEmbedding"),
        "the base case is rewritten"
    );
    assert_eq!(
        out.op_counts().get("Reshape"),
        None,
        "{:?}",
        out.op_counts()
    );
    assert_same_values(&g, &out, c.rows);
    // A view through [0, 2, 3, 1] ([B, H, D, S]): rotated along another axis.
    let g = rotary_graph(&c, &[0, 2, 3, 1], false, None);
    let out = optimized(&g);
    assert!(reads_views(&out, "RotaryEmbedding"));
    assert_same_values(&g, &out, c.rows);
    // A Reshape that splits rows the other way ([S, B, H, D] of [B, S, H·D], B ≠ S).
    let g = rotary_graph(&c, &[0, 2, 1, 3], true, None);
    let out = optimized(&g);
    assert!(reads_views(&out, "RotaryEmbedding"));
    assert_same_values(&g, &out, c.rows);
    // num_heads that disagrees with the view's heads.
    let g = rotary_graph(&c, &[0, 2, 1, 3], false, Some(2 * c.heads as i64));
    let out = optimized(&g);
    assert!(reads_views(&out, "RotaryEmbedding"));
    assert_same_values(&g, &out, c.rows);
}

#[test]
fn attention_near_misses_keep_their_views() {
    let c = AttentionCase {
        rows: Rows {
            batch: 2,
            seq: 3,
            symbolic: false,
        },
        kv_seq: 3,
        past: Some(2),
        kv_heads: 2,
        n_rep: 2,
        head_dim: 4,
        v_head_dim: 4,
        mask: 1,
        causal: false,
        scale: None,
        head_attrs: true,
        split: Target::Computed,
        merge: Target::Computed,
        minus: true,
    };
    let g = attention_graph(&c, None);
    let out = optimized(&g);
    assert!(
        !reads_views(&out, "Attention"),
        "the base case is rewritten"
    );
    assert_same_values(&g, &out, c.rows);
    // q_num_heads that disagrees with q's view.
    let g = attention_graph(&c, Some(2));
    let out = optimized(&g);
    assert!(reads_views(&out, "Attention"));
    assert_same_values(&g, &out, c.rows);
}

#[test]
fn merge_near_misses_stay() {
    // [B, S, H·D] split, transposed and back, then reshaped to [B·S, H·D]: not x's shape.
    let rows = Rows {
        batch: 2,
        seq: 3,
        symbolic: false,
    };
    let mut b = GraphBuilder::new("g");
    let x = b.input("x", DType::F32, rows.shape(&[8]));
    let viewed = view(&mut b, &x, Target::Zeros, rows, 2, false, 4, &[0, 2, 1, 3]);
    let back = b.op(
        "Transpose",
        &[&viewed],
        vec![("perm", Attr::Ints(vec![0, 2, 1, 3]))],
    );
    let flat = b.const_i64(&[6, 8]);
    b.output("y", DType::F32, Shape::new([6i64, 8]));
    b.op_into("Reshape", &[&back, &flat], vec![], "y");
    let g = b.finish();
    let out = optimized(&g);
    assert!(
        out.op_counts().contains_key("Reshape"),
        "{:?}",
        out.op_counts()
    );
    assert_same_values(&g, &out, rows);
    // Transposes that do not cancel ([0, 2, 1, 3] then [0, 1, 3, 2]).
    let mut b = GraphBuilder::new("g");
    let x = b.input("x", DType::F32, rows.shape(&[8]));
    let viewed = view(&mut b, &x, Target::Zeros, rows, 2, false, 4, &[0, 2, 1, 3]);
    let back = b.op(
        "Transpose",
        &[&viewed],
        vec![("perm", Attr::Ints(vec![0, 1, 3, 2]))],
    );
    let shape = b.const_i64(&[2, 3, 8]);
    b.output("y", DType::F32, rows.shape(&[8]));
    b.op_into("Reshape", &[&back, &shape], vec![], "y");
    let g = b.finish();
    let out = optimized(&g);
    assert!(
        out.op_counts().contains_key("Transpose"),
        "{:?}",
        out.op_counts()
    );
    assert_same_values(&g, &out, rows);
}

/// `x` `[B, S, H·D]` → `Reshape(x, [B, S, H or −1, D])` → a per-head norm over the last axis
/// (RMSNormalization, or LayerNormalization with a bias; weights `[D]` inputs) → Transpose
/// `[0, 2, 1, 3]` → RotaryEmbedding → merged back into `y` (qwen3's q/k path); with
/// `swap_rows` the split is `[S, B, H, D]` (constant), which is not a head view.
fn per_head_norm_graph(c: &RotaryCase, layer: bool, swap_rows: bool) -> Graph {
    norm_graph(c, layer, swap_rows, false)
}

/// [`per_head_norm_graph`], with the norm after the Transpose when `after` (gemma3's q/k
/// path: `RMSNormalization(Transpose(Reshape(x)))`).
fn norm_graph(c: &RotaryCase, layer: bool, swap_rows: bool, after: bool) -> Graph {
    let (h, d) = (c.heads, c.head_dim);
    let mut b = GraphBuilder::new("g");
    let x = b.input("x", DType::F32, c.rows.shape(&[h * d]));
    let half = if c.rotary_dim == 0 { d } else { c.rotary_dim } / 2;
    let caches = if swap_rows {
        Shape::new([c.rows.seq as i64, c.rows.batch as i64, half as i64])
    } else {
        c.rows.shape(&[half])
    };
    let cos = b.input("cos", DType::F32, caches.clone());
    let sin = b.input("sin", DType::F32, caches);
    let w = b.input("w", DType::F32, Shape::new([d as i64]));
    let heads = if c.minus { -1 } else { h as i64 };
    let shape = if swap_rows {
        let (batch, seq) = (c.rows.batch as i64, c.rows.seq as i64);
        b.const_i64(&[seq, batch, heads, d as i64])
    } else {
        reshape_target(&mut b, &x, c.split, c.rows, &[heads, d as i64])
    };
    let split = b.op("Reshape", &[&x, &shape], vec![]);
    let split = if after {
        b.op(
            "Transpose",
            &[&split],
            vec![("perm", Attr::Ints(vec![0, 2, 1, 3]))],
        )
    } else {
        split
    };
    let eps = ("epsilon", Attr::Float(1e-6));
    let normed = if layer {
        let bias = b.input("bias", DType::F32, Shape::new([d as i64]));
        b.op(
            "LayerNormalization",
            &[&split, &w, &bias],
            vec![("axis", Attr::Int(-1)), eps],
        )
    } else {
        b.op(
            "RMSNormalization",
            &[&split, &w],
            vec![("axis", Attr::Int(-1)), eps],
        )
    };
    let v = if after {
        normed
    } else {
        b.op(
            "Transpose",
            &[&normed],
            vec![("perm", Attr::Ints(vec![0, 2, 1, 3]))],
        )
    };
    let mut attrs = vec![("interleaved", Attr::Int(c.interleaved as i64))];
    if c.rotary_dim > 0 {
        attrs.push(("rotary_embedding_dim", Attr::Int(c.rotary_dim as i64)));
    }
    let rotated = b.op("RotaryEmbedding", &[&v, &cos, &sin], attrs);
    b.output("y", DType::F32, c.rows.shape(&[h * d]));
    merge(&mut b, &rotated, &x, c.merge, c.rows, h * d, "y");
    b.finish()
}

/// Proves the per-head norm rule `name` with `rotary-on-3d-heads` and `heads-merged-back`,
/// which then absorb the view it writes: no Transpose is left.
fn prove_per_head_norm(name: &str, g: Graph, rows: Rows, seed: u64) -> Result<(), TestCaseError> {
    let values = inputs(&g, rows, 0, seed);
    let mut rules = rules_for(name);
    rules.extend([rule("rotary-on-3d-heads"), rule("heads-merged-back")]);
    prove_with(&rule(name), rules, "default", g, values, 0.0)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn per_head_rms_norm_as_view(c in rotary_case(), seed in any::<u64>()) {
        prove_per_head_norm("per-head-rms-norm-as-view", per_head_norm_graph(&c, false, false), c.rows, seed)?;
    }

    #[test]
    fn rms_norm_before_transpose(c in rotary_case(), seed in any::<u64>()) {
        let g = norm_graph(&c, false, false, true);
        let values = inputs(&g, c.rows, 0, seed);
        let name = "rms-norm-before-transpose";
        let mut rules = rules_for(name);
        rules.extend(
            ["per-head-rms-norm-as-view", "rotary-on-3d-heads", "heads-merged-back"].map(rule),
        );
        prove_with(&rule(name), rules, "default", g, values, 0.0)?;
    }

    #[test]
    fn per_head_layer_norm_as_view(c in rotary_case(), seed in any::<u64>()) {
        prove_per_head_norm("per-head-layer-norm-as-view", per_head_norm_graph(&c, true, false), c.rows, seed)?;
    }
}

#[test]
fn per_head_norm_needs_a_head_view() {
    let c = base_rotary();
    let g = per_head_norm_graph(&c, false, false);
    let out = optimized(&g);
    assert!(
        !reads_views(&out, "RotaryEmbedding"),
        "the base case is rewritten"
    );
    assert_same_values(&g, &out, c.rows);
    // A Reshape that splits rows the other way ([S, B, H, D] of [B, S, H·D], B ≠ S): left.
    let g = per_head_norm_graph(&c, true, true);
    let out = optimized(&g);
    assert!(reads_views(&out, "RotaryEmbedding"));
    assert_same_values(&g, &out, c.rows);
    // The norm after the Transpose is moved before it, then read the same way.
    let g = norm_graph(&c, false, false, true);
    let out = optimized(&g);
    assert!(!reads_views(&out, "RotaryEmbedding"));
    assert_same_values(&g, &out, c.rows);
}

/// One multi-query case (GPT-BigCode's export): `qkv [B, S, (Hq + 2)·D]` unsqueezed to
/// `[B, 1, S, ·]` and split on its last axis; q viewed as `Hq` heads (target computed from
/// `Shape(qkv)`, or numbers), one key and one value head, a cache of `past` positions.
#[derive(Debug, Clone, Copy)]
struct MultiQueryCase {
    rows: Rows,
    q_heads: usize,
    head_dim: usize,
    past: usize,
    computed: bool,
    minus: bool,
}

fn multi_query_case() -> impl Strategy<Value = MultiQueryCase> {
    (
        (1usize..3, 1usize..4, any::<bool>()),
        (1usize..4, 1usize..4, 0usize..3),
        (any::<bool>(), any::<bool>()),
    )
        .prop_map(
            |((batch, seq, symbolic), (q_heads, head_dim, past), (computed, minus))| {
                MultiQueryCase {
                    rows: Rows {
                        batch,
                        seq,
                        symbolic,
                    },
                    q_heads,
                    head_dim,
                    past,
                    // Named batch and sequence can only be read from Shape.
                    computed: computed || symbolic,
                    minus,
                }
            },
        )
}

/// The graph of a [`MultiQueryCase`]: the 4-D Attention over the split, its output merged back
/// to `[B, S, Hq·D]`, the presents as outputs. With `separate`, q, k and v are separate inputs
/// instead (`[B, S, Hq·D]`, and `[B, S, D]` each unsqueezed at axis 1), nothing split.
fn multi_query_graph(c: &MultiQueryCase, separate: bool) -> Graph {
    let (hq, d, rows) = (c.q_heads, c.head_dim, c.rows);
    let mut b = GraphBuilder::new("g");
    let qkv = b.input("qkv", DType::F32, rows.shape(&[(hq + 2) * d]));
    let one = b.const_i64(&[1]);
    let parts: Vec<String> = if separate {
        let q = b.input("q", DType::F32, rows.shape(&[hq * d]));
        let k = b.input("k", DType::F32, rows.shape(&[d]));
        let v = b.input("v", DType::F32, rows.shape(&[d]));
        let k = b.op("Unsqueeze", &[&k, &one], vec![]);
        let v = b.op("Unsqueeze", &[&v, &one], vec![]);
        vec![q, k, v]
    } else {
        let unsqueezed = b.op("Unsqueeze", &[&qkv, &one], vec![]);
        let sizes = b.const_i64(&[(hq * d) as i64, d as i64, d as i64]);
        let parts: Vec<String> = (0..3).map(|_| b.fresh_name("part")).collect();
        b.node(
            "",
            "Split",
            &[&unsqueezed, &sizes],
            vec![("axis", Attr::Int(3))],
            parts.clone(),
        );
        parts
    };
    let how = if c.computed {
        Target::Computed
    } else {
        Target::Explicit
    };
    let h = if c.minus { -1 } else { hq as i64 };
    let target = reshape_target(&mut b, &qkv, how, rows, &[h, d as i64]);
    let split = b.op("Reshape", &[&parts[0], &target], vec![]);
    let q = b.op(
        "Transpose",
        &[&split],
        vec![("perm", Attr::Ints(vec![0, 2, 1, 3]))],
    );
    let (s_dim, b_dim) = (rows.shape(&[]).0[1].clone(), b_of(rows));
    let (past, present) = if rows.symbolic {
        (
            Dim::Fixed(c.past as i64),
            Dim::Sym(format!("{} + seq", c.past)),
        )
    } else {
        (
            Dim::Fixed(c.past as i64),
            Dim::Fixed((c.past + rows.seq) as i64),
        )
    };
    let cache = |t: Dim| Shape(vec![b_dim.clone(), Dim::Fixed(1), t, Dim::Fixed(d as i64)]);
    // The inputs' total length is named `total` (what [`inputs`] sizes as past + S).
    let total = if rows.symbolic {
        Dim::Sym("total".into())
    } else {
        present.clone()
    };
    let mask = b.input(
        "mask",
        DType::F32,
        Shape(vec![b_dim.clone(), Dim::Fixed(1), s_dim, total]),
    );
    let pk = b.input("past_key", DType::F32, cache(past.clone()));
    let pv = b.input("past_value", DType::F32, cache(past));
    b.output("present_key", DType::F32, cache(present.clone()));
    b.output("present_value", DType::F32, cache(present));
    let y4 = b.fresh_name("Attention");
    b.node(
        "",
        "Attention",
        &[&q, &parts[1], &parts[2], &mask, &pk, &pv],
        vec![],
        vec![y4.clone(), "present_key".into(), "present_value".into()],
    );
    b.output("y", DType::F32, rows.shape(&[hq * d]));
    merge(&mut b, &y4, &qkv, how, rows, hq * d, "y");
    b.finish()
}

/// The rules that read a multi-query layout together (see [`multi_query_graph`]).
const MULTI_QUERY_RULES: [&str; 5] = [
    "split-of-unsqueezed",
    "reshape-of-unsqueezed",
    "unsqueezed-single-head",
    "attention-on-3d-heads",
    "heads-merged-back",
];

/// Proves `name` (one of [`MULTI_QUERY_RULES`]) together with the others: each is needed for
/// the 3-D Attention, so mutation testing (which removes `name` only) leaves the graph as it was.
/// `unsqueezed-single-head` is proven on separate q, k, v (`separate` in
/// [`multi_query_graph`]) with the Attention rules alone: on the split, the other two rules
/// change the graph without it.
fn prove_multi_query(name: &str, c: &MultiQueryCase, seed: u64) -> Result<(), TestCaseError> {
    let separate = name == "unsqueezed-single-head";
    let g = multi_query_graph(c, separate);
    let values = inputs(&g, c.rows, c.past + c.rows.seq, seed);
    let mut rules = rules_for(name);
    rules.extend(
        MULTI_QUERY_RULES
            .iter()
            .skip(if separate { 3 } else { 0 })
            .filter(|r| **r != name)
            .map(|r| rule(r)),
    );
    prove_with(&rule(name), rules, "default", g, values, 0.0)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    #[test]
    fn split_of_unsqueezed(c in multi_query_case(), seed in any::<u64>()) {
        prove_multi_query("split-of-unsqueezed", &c, seed)?;
    }

    #[test]
    fn reshape_of_unsqueezed(c in multi_query_case(), seed in any::<u64>()) {
        prove_multi_query("reshape-of-unsqueezed", &c, seed)?;
    }

    #[test]
    fn unsqueezed_single_head(c in multi_query_case(), seed in any::<u64>()) {
        prove_multi_query("unsqueezed-single-head", &c, seed)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// `Slice(view(x), start, end, axis[, steps 1])` merged back to `[B, S, H·W]`: the slice
    /// becomes a view of a 3-D slice, which `heads-merged-back` then takes out of the views.
    #[test]
    fn sliced_head_view(
        (batch, seq, symbolic) in (1usize..3, 1usize..4, any::<bool>()),
        (heads, head_dim) in (1usize..4, 2usize..7),
        (start, end) in (-8i64..8, -8i64..9),
        to_end in any::<bool>(),
        steps in any::<bool>(),
        axis3 in any::<bool>(),
        how_split in 0usize..3,
        how_merge in 0usize..3,
        minus in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let rows = Rows { batch, seq, symbolic };
        let end = if to_end { i64::MAX } else { end };
        let width = sliced_width(start, end, head_dim);
        prop_assume!(width > 0);
        let mut b = GraphBuilder::new("g");
        let x = b.input("x", DType::F32, rows.shape(&[heads * head_dim]));
        b.output("y", DType::F32, rows.shape(&[heads * width as usize]));
        let v = view(&mut b, &x, rows.target(how_split), rows, heads, minus, head_dim, &[0, 2, 1, 3]);
        let part = slice(&mut b, &v, (start, end), if axis3 { 3 } else { -1 }, steps);
        merge(&mut b, &part, &x, rows.target(how_merge), rows, heads * width as usize, "y");
        let g = b.finish();
        let values = inputs(&g, rows, seq, seed);
        let name = if steps { "sliced-head-view-with-steps" } else { "sliced-head-view" };
        prove_merged(name, g, values)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// `Transpose(Gather(Reshape(x, [B, S, H, P, D]), j, axis), [0, 2, 1, 3])` merged back to
    /// `[B, S, H·D]` (BLOOM's and Falcon's q, k and v): the gathered part becomes a view of a
    /// 3-D slice, which `heads-merged-back` then takes out of the views.
    #[test]
    fn gathered_head_view(
        (batch, seq, symbolic) in (1usize..3, 1usize..4, any::<bool>()),
        (heads, parts, head_dim) in (1usize..4, 1usize..4, 1usize..5),
        j in -3i64..3,
        axis3 in any::<bool>(),
        how_split in 0usize..3,
        how_merge in 0usize..3,
        seed in any::<u64>(),
    ) {
        prop_assume!(j < parts as i64 && j >= -(parts as i64));
        let rows = Rows { batch, seq, symbolic };
        let mut b = GraphBuilder::new("g");
        let x = b.input("x", DType::F32, rows.shape(&[heads * parts * head_dim]));
        b.output("y", DType::F32, rows.shape(&[heads * head_dim]));
        let tail = [heads as i64, parts as i64, head_dim as i64];
        let shape = reshape_target(&mut b, &x, rows.target(how_split), rows, &tail);
        let split = b.op("Reshape", &[&x, &shape], vec![]);
        let index = b.constant(mobius::ir::TensorData::from_i64(vec![], &[j]));
        let axis = if axis3 { 3 } else { -2 };
        let part = b.op("Gather", &[&split, &index], vec![("axis", Attr::Int(axis))]);
        let v = b.op("Transpose", &[&part], vec![("perm", Attr::Ints(vec![0, 2, 1, 3]))]);
        merge(&mut b, &v, &x, rows.target(how_merge), rows, heads * head_dim, "y");
        let g = b.finish();
        let values = inputs(&g, rows, seq, seed);
        prove_merged("gathered-head-view", g, values)?;
    }
}

/// How many of `extent` entries `Slice(start, end)` keeps (step 1; negative bounds count from
/// the end; 0 or less when it keeps none).
fn sliced_width(start: i64, end: i64, extent: usize) -> i64 {
    let n = extent as i64;
    let clamp = |v: i64| if v < 0 { v + n } else { v }.clamp(0, n);
    clamp(end) - clamp(start)
}

/// `Slice(x, start, end, axis)`, with an explicit `steps` input of 1 when `steps`.
fn slice(
    b: &mut GraphBuilder,
    x: &str,
    (start, end): (i64, i64),
    axis: i64,
    steps: bool,
) -> String {
    let (starts, ends, axes) = (
        b.const_i64(&[start]),
        b.const_i64(&[end]),
        b.const_i64(&[axis]),
    );
    if steps {
        let one = b.const_i64(&[1]);
        b.op("Slice", &[x, &starts, &ends, &axes, &one], vec![])
    } else {
        b.op("Slice", &[x, &starts, &ends, &axes], vec![])
    }
}

/// `Reshape(x, [B, S, G or −1, D])`: the head split of `x` (not transposed).
#[allow(clippy::too_many_arguments)]
fn head_split(
    b: &mut GraphBuilder,
    x: &str,
    how: Target,
    rows: Rows,
    heads: usize,
    minus: bool,
    head_dim: usize,
) -> String {
    let h = if minus { -1 } else { heads as i64 };
    let shape = reshape_target(b, x, how, rows, &[h, head_dim as i64]);
    b.op("Reshape", &[x, &shape], vec![])
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// `Slice(Reshape(x, [B, S, G, D]), start, end, axis 2[, steps 1])`, viewed heads-first and
    /// merged back to `[B, S, W·D]`: the part becomes the split of a 3-D slice of `x`, which
    /// `heads-merged-back` then takes out of the views.
    #[test]
    fn head_slice_of_split(
        (batch, seq, symbolic) in (1usize..3, 1usize..4, any::<bool>()),
        (heads, head_dim) in (1usize..5, 1usize..5),
        (start, end) in (-6i64..6, -6i64..7),
        to_end in any::<bool>(),
        steps in any::<bool>(),
        axis2 in any::<bool>(),
        how_split in 0usize..3,
        how_merge in 0usize..3,
        minus in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let rows = Rows { batch, seq, symbolic };
        let end = if to_end { i64::MAX } else { end };
        let width = sliced_width(start, end, heads);
        prop_assume!(width > 0);
        let mut b = GraphBuilder::new("g");
        let x = b.input("x", DType::F32, rows.shape(&[heads * head_dim]));
        b.output("y", DType::F32, rows.shape(&[width as usize * head_dim]));
        let split = head_split(&mut b, &x, rows.target(how_split), rows, heads, minus, head_dim);
        let part = slice(&mut b, &split, (start, end), if axis2 { 2 } else { -2 }, steps);
        let view = b.op("Transpose", &[&part], vec![("perm", Attr::Ints(vec![0, 2, 1, 3]))]);
        merge(&mut b, &view, &x, rows.target(how_merge), rows, width as usize * head_dim, "y");
        let g = b.finish();
        let values = inputs(&g, rows, seq, seed);
        let name = if steps { "head-slice-of-split-with-steps" } else { "head-slice-of-split" };
        prove_merged(name, g, values)?;
    }

    /// `Gather(Reshape(x, [B, S, G, D]), [i], axis 2 or −2)` (one head, the axis kept), viewed
    /// heads-first and merged back to `[B, S, D]`.
    #[test]
    fn head_gather_of_split(
        (batch, seq, symbolic) in (1usize..3, 1usize..4, any::<bool>()),
        (heads, head_dim) in (1usize..5, 1usize..5),
        index in -4i64..4,
        axis2 in any::<bool>(),
        how_split in 0usize..3,
        how_merge in 0usize..3,
        minus in any::<bool>(),
        seed in any::<u64>(),
    ) {
        prop_assume!(-(heads as i64) <= index && index < heads as i64);
        let rows = Rows { batch, seq, symbolic };
        let mut b = GraphBuilder::new("g");
        let x = b.input("x", DType::F32, rows.shape(&[heads * head_dim]));
        b.output("y", DType::F32, rows.shape(&[head_dim]));
        let split = head_split(&mut b, &x, rows.target(how_split), rows, heads, minus, head_dim);
        let idx = b.const_i64(&[index]);
        let part = b.op(
            "Gather",
            &[&split, &idx],
            vec![("axis", Attr::Int(if axis2 { 2 } else { -2 }))],
        );
        let view = b.op("Transpose", &[&part], vec![("perm", Attr::Ints(vec![0, 2, 1, 3]))]);
        merge(&mut b, &view, &x, rows.target(how_merge), rows, head_dim, "y");
        let g = b.finish();
        let values = inputs(&g, rows, seq, seed);
        prove_merged("head-gather-of-split", g, values)?;
    }
}
