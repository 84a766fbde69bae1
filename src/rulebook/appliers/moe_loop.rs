//! The applier of `recognize/moe_loop.rules` (MoELoop): the sparse mixture-of-experts block
//! as TorchScript traces transformers' loop over the experts (4.57's `Qwen3MoeSparseMoeBlock`
//! and its kin: `one_hot(selected).permute(2, 1, 0)`, per expert `torch.where` of its mask,
//! its SwiGLU expert on the tokens that picked it, scaled by their routing weight and
//! `index_add_`-ed into zeros) → the dense block `mobius build` writes
//! ([`crate::models::components::sparse_moe`]), which `fusion/moe.rules` turns into
//! `com.microsoft::MoE`. Read only when every expert's unrolled step is there.

use egg::Id;

use super::moe::{cast_to, is_init, matrix, projected, routing_matrix, unset_or};
use crate::ir::DType;
use crate::ops::types::SymDim;
use crate::ops::value::AttrValue;
use crate::opt::analysis::OnnxGraph;
use crate::opt::bind::{Applier, Site};
use crate::opt::emit::Emit;
use crate::opt::query::{const_ints, find_op, int_attr, ops_named};
use crate::opt::shape_value::shape_value;

/// `moe-expert-loop`.
pub(super) const MOE_EXPERT_LOOP: Applier<4> = Applier::new(
    ["?acc", "?scatter", "?shape", "?allowzero"],
    moe_expert_loop,
);

/// The two operands of each `op` e-node of class `id`, in both orders (for commutative ops).
fn operand_pairs(g: &OnnxGraph, id: Id, op: &str) -> Vec<(Id, Id)> {
    ops_named(g, id, op)
        .iter()
        .flat_map(|n| match n.input_ids() {
            [a, b] => vec![(*a, *b), (*b, *a)],
            _ => vec![],
        })
        .collect()
}

/// Whether classes `a` and `b` are one class.
fn same(g: &OnnxGraph, a: Id, b: Id) -> bool {
    g.find(a) == g.find(b)
}

/// Whether class `id` holds the whole `Shape(x)` (start 0 or unset, end unset).
fn is_shape_of(g: &OnnxGraph, id: Id, x: Id) -> bool {
    ops_named(g, id, "Shape").iter().any(|s| {
        same(g, s.input_ids()[0], x)
            && s.attr_id("start").is_none_or(|a| {
                matches!(
                    g[a].data.attr(),
                    None | Some(AttrValue::Unset | AttrValue::Int(0))
                )
            })
            && s.attr_id("end")
                .is_none_or(|a| matches!(g[a].data.attr(), None | Some(AttrValue::Unset)))
    })
}

/// Whether class `id` is `ConstantOfShape(s; value +0.0 f32)`; `s`.
fn f32_zeros(g: &OnnxGraph, id: Id) -> Option<Id> {
    ops_named(g, id, "ConstantOfShape").iter().find_map(|c| {
        let value = g[c.attr_id("value")?].data.attr()?;
        let zero = matches!(value, AttrValue::Tensor(l)
            if l.dtype == DType::F32 && l.bytes.len() == 4 && l.bytes.iter().all(|&b| b == 0));
        zero.then(|| c.input_ids()[0])
    })
}

/// Whether class `id` is a 0-d integer constant; its value.
fn scalar_index(g: &OnnxGraph, id: Id) -> Option<i64> {
    let t = g[id].data.tensor()?;
    if !t.shape.as_ref()?.is_empty() {
        return None;
    }
    match const_ints(g, id)?.as_slice() {
        [v] => Some(*v),
        _ => None,
    }
}

/// The router the loop reads: `(p, i) = TopK(Cast?(Softmax(logits [T, E], last axis)), k)`
/// and the routing weights `Cast?(p)` or `Cast?(p / ReduceSum(p, −1))`.
struct Router {
    /// The router logits `[T, E]` (f32).
    logits: Id,
    /// The TopK tuple.
    top: Id,
    /// Experts per token.
    k: i64,
    /// Experts E.
    experts: i64,
    /// Whether the top-k weights are divided by their sum.
    normalize: bool,
}

/// The TopK tuple whose output 0 class `p` projects, over the last axis, largest first.
fn router_top_k(g: &OnnxGraph, p: Id) -> Option<Id> {
    let tuple = projected(g, p, 0)?;
    let node = find_op(g, tuple, "TopK")?;
    let axis = node
        .attr_id("axis")
        .map_or(Some(-1), |a| match g[a].data.attr() {
            None | Some(AttrValue::Unset) => Some(-1),
            Some(AttrValue::Int(v)) => Some(*v),
            _ => None,
        })?;
    (matches!(axis, -1 | 1) && unset_or(g, node.attr_id("largest"), 1)).then_some(tuple)
}

/// Reads the routing weights class `rw` `[T, k]` (see [`Router`]).
fn read_router(g: &OnnxGraph, rw: Id) -> Option<Router> {
    let mut candidates = vec![rw];
    candidates.extend(cast_to(g, rw, DType::F32));
    let (top, normalize) = candidates.iter().find_map(|&c| {
        if let Some(t) = router_top_k(g, c) {
            return Some((t, false));
        }
        ops_named(g, c, "Div").iter().find_map(|div| {
            let [p, sum] = div.input_ids() else {
                return None;
            };
            let t = router_top_k(g, *p)?;
            let r = find_op(g, *sum, "ReduceSum")?;
            let [x, axes] = r.input_ids() else {
                return None;
            };
            let ok = same(g, *x, *p)
                && matches!(const_ints(g, *axes)?.as_slice(), [-1 | 1])
                && unset_or(g, r.attr_id("keepdims"), 1)
                && unset_or(g, r.attr_id("noop_with_empty_axes"), 0);
            ok.then_some((t, true))
        })
    })?;
    let node = find_op(g, top, "TopK")?;
    let [probs, k] = node.input_ids() else {
        return None;
    };
    let probs = find_op(g, *probs, "Softmax")
        .or_else(|| find_op(g, cast_to(g, *probs, DType::F32)?, "Softmax"))?;
    if !matches!(int_attr(g, probs.attr_id("axis")?), None | Some(-1 | 1)) {
        return None;
    }
    let logits = probs.input_ids()[0];
    let t = g[logits].data.tensor()?;
    let experts = match t.shape.as_deref()? {
        [_, e] => e.known()?,
        _ => return None,
    };
    let k = match const_ints(g, *k)?.as_slice() {
        [k] if (1..=experts).contains(k) => *k,
        _ => return None,
    };
    (t.dtype? == DType::F32).then_some(Router {
        logits,
        top,
        k,
        experts,
        normalize,
    })
}

/// One unrolled step of the loop, as [`read_step`] reads it.
struct Step {
    /// The expert's index e (the mask row it reads).
    expert: i64,
    /// Its gate, up and down weights `[H, I]`, `[H, I]`, `[I, H]`.
    weights: [Id; 3],
    /// The tokens `[T, H]` it gathers from.
    tokens: Id,
    /// The mask `Transpose(OneHot(i, E, [0, 1]), [2, 1, 0])` it reads a row of.
    mask: Id,
    /// The routing weights `[T, k]` it reads.
    weights_of: Id,
    /// The width of the routing weights its column index multiplies the tokens by.
    kk: Id,
}

/// The slot and token indices `(j, t)` of class `split_get` pair: `Squeeze(Split(
/// Transpose(NonZero(Cast(Gather(m, e; axis 0) → bool)), [1, 0]), [1, 1]; axis 1)[·], [1])`,
/// with `(m, e)`.
fn hits(g: &OnnxGraph, slot: Id, token: Id) -> Option<(Id, i64)> {
    let squeezed = |id: Id, index: usize| {
        ops_named(g, id, "Squeeze").iter().find_map(|s| {
            let [x, axes] = s.input_ids() else {
                return None;
            };
            (const_ints(g, *axes)? == [1]).then(|| projected(g, *x, index))?
        })
    };
    let split = squeezed(token, 1)?;
    if squeezed(slot, 0).map(|s| g.find(s)) != Some(g.find(split)) {
        return None;
    }
    let node = find_op(g, split, "Split")?;
    let [pairs, sizes] = node.input_ids() else {
        return None;
    };
    if const_ints(g, *sizes)? != [1, 1] || int_attr(g, node.attr_id("axis")?) != Some(1) {
        return None;
    }
    let t = find_op(g, *pairs, "Transpose")?;
    if !matches!(g[t.attr_id("perm")?].data.attr(), Some(AttrValue::Ints(p)) if p[..] == [1, 0]) {
        return None;
    }
    let nz = find_op(g, t.input_ids()[0], "NonZero")?;
    let row = cast_to(g, nz.input_ids()[0], DType::Bool)?;
    let gather = find_op(g, row, "Gather")?;
    let [m, e] = gather.input_ids() else {
        return None;
    };
    (int_attr(g, gather.attr_id("axis")?).unwrap_or(0) == 0).then_some(())?;
    Some((*m, scalar_index(g, *e)?))
}

/// `z` when class `id` is `SiLU(z · Wg) · (z · Wu)` (`a · σ(a)`, any operand order) over
/// initializers; `(z, Wg, Wu)`.
fn swiglu(g: &OnnxGraph, id: Id) -> Option<(Id, Id, Id)> {
    operand_pairs(g, id, "Mul")
        .into_iter()
        .find_map(|(act, up)| {
            let gate = operand_pairs(g, act, "Mul")
                .into_iter()
                .find_map(|(a, s)| {
                    let sig = find_op(g, s, "Sigmoid")?;
                    same(g, sig.input_ids()[0], a).then_some(a)
                })?;
            let gm = find_op(g, gate, "MatMul")?;
            let um = find_op(g, up, "MatMul")?;
            let ([z, wg], [z2, wu]) = (gm.input_ids(), um.input_ids()) else {
                return None;
            };
            (same(g, *z, *z2) && is_init(g, *wg) && is_init(g, *wu)).then_some((*z, *wg, *wu))
        })
}

/// `(w, j, index, kk)` when class `id` is `Gather(Flatten(Unsqueeze(w, [2]); axis 2), index;
/// axis 0)`, `index = j + t · kk` (either order of both), t class `token`: the column
/// `w[t, j]` when `kk` holds w's width.
fn gathered_column(g: &OnnxGraph, id: Id, token: Id) -> Option<(Id, Id, Id, Id)> {
    ops_named(g, id, "Gather").iter().find_map(|gather| {
        let [flat, index] = gather.input_ids() else {
            return None;
        };
        if int_attr(g, gather.attr_id("axis")?).unwrap_or(0) != 0 {
            return None;
        }
        let (j, kk) = operand_pairs(g, *index, "Add")
            .into_iter()
            .find_map(|(j, tk)| {
                operand_pairs(g, tk, "Mul")
                    .into_iter()
                    .find_map(|(t, kk)| same(g, t, token).then_some((j, kk)))
            })?;
        let f = find_op(g, *flat, "Flatten")?;
        let u = find_op(g, f.input_ids()[0], "Unsqueeze")?;
        let [w, axes] = u.input_ids() else {
            return None;
        };
        let ok = int_attr(g, f.attr_id("axis")?) == Some(2)
            && matches!(const_ints(g, *axes)?.as_slice(), [2 | -1]);
        ok.then_some((*w, j, *index, kk))
    })
}

/// `(w, j, kk)` when class `id` is the column [`gathered_column`] under Reshapes to
/// `[-1, 1]` or to `Concat(Shape(index), [1])` (each `[n, 1]` again).
fn weight_column(g: &OnnxGraph, id: Id, token: Id) -> Option<(Id, Id, Id)> {
    let mut cur = id;
    let mut sized_by = Vec::new();
    for _ in 0..8 {
        if let Some((w, j, index, kk)) = gathered_column(g, cur, token) {
            return sized_by
                .iter()
                .all(|&a| same(g, a, index))
                .then_some((w, j, kk));
        }
        let (x, by) = ops_named(g, cur, "Reshape").iter().find_map(|r| {
            let [x, shape] = r.input_ids() else {
                return None;
            };
            if !unset_or(g, r.attr_id("allowzero"), 0) {
                return None;
            }
            if shape_value(g, *shape).as_deref() == Some(&[SymDim::Known(-1), SymDim::Known(1)][..])
            {
                return Some((*x, None));
            }
            let c = find_op(g, *shape, "Concat")?;
            let [s, one] = c.input_ids() else {
                return None;
            };
            let sh = find_op(g, *s, "Shape")?;
            let whole = is_shape_of(g, *s, sh.input_ids()[0]);
            (whole && const_ints(g, *one)? == [1]).then_some((*x, Some(sh.input_ids()[0])))
        })?;
        sized_by.extend(by);
        cur = x;
    }
    None
}

/// Reads one unrolled step `ScatterElements(zeros like prev, Expand(Unsqueeze(t, [1]),
/// Shape(u)), u; axis 0)`, `u = Expand(Cast?(Expert(x[t]) · w[t, j]), Shape(prev[0:1, 0:]))`,
/// for the hits `(j, t)` of expert e ([`hits`]) of a router of `k` experts per token.
fn read_step(g: &OnnxGraph, prev: Id, scatter: Id) -> Option<Step> {
    ops_named(g, scatter, "ScatterElements")
        .iter()
        .find_map(|sc| {
            let [zeros, index, update] = sc.input_ids() else {
                return None;
            };
            let reduction_ok = match g[sc.attr_id("reduction")?].data.attr() {
                Some(AttrValue::Unset) => true,
                Some(AttrValue::Str(r)) => r.as_str() == "none",
                _ => false,
            };
            let plain = int_attr(g, sc.attr_id("axis")?).unwrap_or(0) == 0 && reduction_ok;
            if !plain || !is_shape_of(g, f32_zeros(g, *zeros)?, prev) {
                return None;
            }
            // The update: the contribution expanded to `[min(1, T), H]`, which keeps it.
            let expand = find_op(g, *update, "Expand")?;
            let [contribution, target] = expand.input_ids() else {
                return None;
            };
            let head = ops_named(g, *target, "Shape").iter().find_map(|s| {
                let sl = find_op(g, s.input_ids()[0], "Slice")?;
                let ins = sl.input_ids();
                let steps_ok = match ins.get(4) {
                    None => true,
                    Some(st) => const_ints(g, *st).as_deref() == Some(&[1, 1][..]),
                };
                let ok = same(g, ins[0], prev)
                    && const_ints(g, *ins.get(1)?)? == [0, 0]
                    && const_ints(g, *ins.get(3)?)? == [0, 1]
                    && steps_ok
                    && is_shape_of(g, *target, s.input_ids()[0]);
                let ends = const_ints(g, ins[2])?;
                (ok && ends.len() == 2 && ends[0] == 1).then_some(ends[1])
            })?;
            // The indices: the tokens broadcast over the update's shape.
            let ex = find_op(g, *index, "Expand")?;
            let [col, shape] = ex.input_ids() else {
                return None;
            };
            if !is_shape_of(g, *shape, *update) {
                return None;
            }
            let u = find_op(g, *col, "Unsqueeze")?;
            let [token, axes] = u.input_ids() else {
                return None;
            };
            if const_ints(g, *axes)? != [1] {
                return None;
            }
            let product = cast_to(g, *contribution, DType::F32).unwrap_or(*contribution);
            operand_pairs(g, product, "Mul")
                .into_iter()
                .find_map(|(y, w)| {
                    let down = find_op(g, y, "MatMul")?;
                    let [act, wd] = down.input_ids() else {
                        return None;
                    };
                    let (z, wg, wu) = swiglu(g, *act)?;
                    if !is_init(g, *wd) {
                        return None;
                    }
                    let (_, h) = matrix(g, *wd)?;
                    if head < h {
                        return None;
                    }
                    // z = Reshape(Gather(Unsqueeze(x, [0]), t; axis 1), [-1, H]).
                    let tokens = ops_named(g, z, "Reshape").iter().find_map(|r| {
                        let [gx, shape] = r.input_ids() else {
                            return None;
                        };
                        let flat = shape_value(g, *shape).as_deref()
                            == Some(&[SymDim::Known(-1), SymDim::Known(h)][..]);
                        let gather = find_op(g, *gx, "Gather")?;
                        let [ux, t] = gather.input_ids() else {
                            return None;
                        };
                        let un = find_op(g, *ux, "Unsqueeze")?;
                        let [x, axes] = un.input_ids() else {
                            return None;
                        };
                        let ok = flat
                            && unset_or(g, r.attr_id("allowzero"), 0)
                            && int_attr(g, gather.attr_id("axis")?) == Some(1)
                            && same(g, *t, *token)
                            && const_ints(g, *axes)? == [0];
                        ok.then_some(*x)
                    })?;
                    // The hits of this expert: j and t of one Split.
                    let (weights_of, slot, kk) = weight_column(g, w, *token)?;
                    let (mask, expert) = hits(g, slot, *token)?;
                    Some(Step {
                        expert,
                        weights: [wg, wu, *wd],
                        tokens,
                        mask,
                        weights_of,
                        kk,
                    })
                })
        })
}

/// The mask `Transpose(OneHot(i, E, [0, 1]; axis −1), [2, 1, 0])` of class `m` over the
/// experts picked by TopK tuple `top`, E `experts`.
fn is_mask(g: &OnnxGraph, m: Id, top: Id, experts: i64) -> bool {
    let read = || {
        let t = find_op(g, m, "Transpose")?;
        let perm_ok = matches!(g[t.attr_id("perm")?].data.attr(), Some(AttrValue::Ints(p)) if p[..] == [2, 1, 0]);
        let oh = find_op(g, t.input_ids()[0], "OneHot")?;
        let [i, depth, values] = oh.input_ids() else {
            return None;
        };
        let ok = perm_ok
            && projected(g, *i, 1).is_some_and(|t| same(g, t, top))
            && const_ints(g, *depth)? == [experts]
            && const_ints(g, *values)? == [0, 1]
            && int_attr(g, oh.attr_id("axis")?).unwrap_or(-1) == -1;
        ok.then_some(())
    };
    read().is_some()
}

/// The loop `Reshape(Σ_e steps, shape)` ([`read_step`], every expert once, summed into f32
/// zeros `[T, H]` in any order) with `shape` x's own dims, the tokens `Reshape(x, [−1, H])` of
/// a 3-D f32 x → the dense block over x: stacks `Concat(W_0, …, W_{E−1})` (the gate and up
/// weights along their columns, the down weights along their rows), routing matrix of the
/// same logits (`MatMul(x, Wr)` when they are `MatMul(tokens, Wr)`, else the logits reshaped
/// to `[B, S, E]`), k and renormalisation.
fn moe_expert_loop(
    g: &mut OnnxGraph,
    _: Site<'_>,
    [acc, scatter, shape, allowzero]: [Id; 4],
) -> Option<Id> {
    if !matches!(
        g[allowzero].data.attr(),
        Some(AttrValue::Unset | AttrValue::Int(0))
    ) {
        return None;
    }
    // Walk the chain of additions back to the zeros, collecting (prev, scatter) pairs.
    let mut pairs = vec![(acc, scatter)];
    let mut cur = acc;
    let zeros_shape = loop {
        if let Some(s) = f32_zeros(g, cur) {
            break s;
        }
        let next = operand_pairs(g, cur, "Add")
            .into_iter()
            .find(|(_, s)| find_op(g, *s, "ScatterElements").is_some())?;
        pairs.push(next);
        cur = next.0;
        if pairs.len() > 1024 {
            return None;
        }
    };
    let steps: Vec<Step> = pairs
        .iter()
        .map(|&(prev, s)| read_step(g, prev, s))
        .collect::<Option<_>>()?;
    let first = &steps[0];
    let router = read_router(g, first.weights_of)?;
    let k = router.k;
    if steps.len() as i64 != router.experts {
        return None;
    }
    let e = router.experts;
    let mut seen = vec![false; e as usize];
    for s in &steps {
        let fits = same(g, s.tokens, first.tokens)
            && same(g, s.mask, first.mask)
            && same(g, s.weights_of, first.weights_of)
            && shape_value(g, s.kk).as_deref() == Some(&[SymDim::Known(k)][..])
            && (0..e).contains(&s.expert)
            && !std::mem::replace(&mut seen[s.expert as usize], true);
        if !fits {
            return None;
        }
    }
    if !is_mask(g, first.mask, router.top, e) {
        return None;
    }
    // The tokens: Reshape(x, [-1, H]) of a 3-D f32 x, the loop's output read back as x's dims.
    let (_, i) = matrix(g, first.weights[0])?;
    let (hd, _) = matrix(g, first.weights[0])?;
    let weights_ok = steps.iter().all(|s| {
        matrix(g, s.weights[0]) == Some((hd, i))
            && matrix(g, s.weights[1]) == Some((hd, i))
            && matrix(g, s.weights[2]) == Some((i, hd))
            && s.weights
                .iter()
                .all(|&w| g[w].data.tensor().and_then(|t| t.dtype) == Some(DType::F32))
    });
    let x = ops_named(g, first.tokens, "Reshape").iter().find_map(|r| {
        let [x, flat] = r.input_ids() else {
            return None;
        };
        let t = g[*x].data.tensor()?;
        let dims = t.shape.as_ref()?;
        let ok = t.dtype? == DType::F32
            && dims.len() == 3
            && dims[2].known() == Some(hd)
            && dims.iter().all(|d| *d != SymDim::Unknown)
            && shape_value(g, *flat).as_deref()
                == Some(&[SymDim::Known(-1), SymDim::Known(hd)][..])
            && unset_or(g, r.attr_id("allowzero"), 0)
            && shape_value(g, shape).as_deref() == Some(&dims[..]);
        ok.then_some(*x)
    })?;
    let token_dims = g[first.tokens].data.tensor()?.shape.clone()?;
    let logit_rows = g[router.logits]
        .data
        .tensor()?
        .shape
        .as_ref()?
        .first()
        .cloned();
    if !weights_ok
        || shape_value(g, zeros_shape).as_deref() != Some(&token_dims[..])
        || logit_rows.as_ref() != token_dims.first()
        || token_dims.first() == Some(&SymDim::Unknown)
    {
        return None;
    }
    let tokens = first.tokens;
    let mut ordered = steps;
    ordered.sort_by_key(|s| s.expert);
    let stack = |em: &mut Emit<'_>, which: usize, axis: i64| {
        let parts: Vec<Id> = ordered.iter().map(|s| s.weights[which]).collect();
        match parts[..] {
            [one] => one,
            _ => em.concat(&parts, axis),
        }
    };
    let logits_matmul = find_op(g, router.logits, "MatMul").and_then(|m| match m.input_ids() {
        [t, wr] if same(g, *t, tokens) && is_init(g, *wr) => Some(*wr),
        _ => None,
    });
    let mut em = Emit::new(g);
    let (wg, wu, wd) = (
        stack(&mut em, 0, 1),
        stack(&mut em, 1, 1),
        stack(&mut em, 2, 0),
    );
    let logits = match logits_matmul {
        Some(wr) => em.bin("MatMul", x, wr),
        None => {
            let tokens = em.shape(x, 0, 2);
            let width = em.ints(&[e]);
            let shape = em.concat(&[tokens, width], 0);
            em.op("Reshape", &[router.logits, shape], &[])
        }
    };
    let routing = routing_matrix(&mut em, logits, (e, k), router.normalize, DType::F32)?;
    let gate = em.bin("MatMul", x, wg);
    let sig = em.op("Sigmoid", &[gate], &[]);
    let gate = em.bin("Mul", gate, sig);
    let up = em.bin("MatMul", x, wu);
    let act = em.bin("Mul", gate, up);
    let act = em.reshape(act, &[0, 0, e, i]);
    let weighted = em.bin("Mul", act, routing);
    let weighted = em.reshape(weighted, &[0, 0, e * i]);
    Some(em.bin("MatMul", weighted, wd))
}
