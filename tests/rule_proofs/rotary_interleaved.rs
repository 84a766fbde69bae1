//! Proofs of the interleaved rotary rules (`rewrites/recognize/rotary_interleaved.rules`):
//! TorchScript's `repeat_interleave(2)` subgraph (`NonZero`/`GatherND`, or a constant index)
//! over random ranks, permutations and shapes (known or symbolic) becomes the pairwise
//! repetition; a rotate-every-two chain over pairwise tables (the first half of a rotate-half
//! table, or Cos/Sin of repeated angles) becomes one `RotaryEmbedding(interleaved 1)`.

use std::collections::HashMap;

use mobius::interp::Rng;
use mobius::ir::{Attr, DType, Dim, GraphBuilder, Shape, TensorData};
use proptest::prelude::*;

use super::{prove_on, random_tensor};

/// `dims` as a shape, the dim at `i` named `names[i]` where that is given.
fn shape(dims: &[usize], names: &[Option<String>]) -> Shape {
    Shape(
        dims.iter()
            .enumerate()
            .map(|(i, &d)| match names.get(i).cloned().flatten() {
                Some(name) => Dim::Sym(name),
                None => Dim::Fixed(d as i64),
            })
            .collect(),
    )
}

/// `Some(name)` for each name when `symbolic`, else nothing.
fn named(symbolic: bool, names: &[Option<&str>]) -> Vec<Option<String>> {
    names
        .iter()
        .map(|n| n.filter(|_| symbolic).map(str::to_string))
        .collect()
}

/// The TorchScript `repeat_interleave(2)` of axis `p1[0]` of `t`: `Transpose(GatherND(Expand(
/// Unsqueeze(Transpose(t, p1), [1]), target), idx), p2)`, the index computed through
/// `NonZero` (else a constant), the Expand target computed from `Shape` (else a constant).
#[allow(clippy::too_many_arguments)]
fn interleave(
    b: &mut GraphBuilder,
    t: &str,
    dims: &[usize],
    p1: &[usize],
    p2: &[usize],
    computed_index: bool,
    computed_target: bool,
) -> String {
    let n = dims.len();
    let m = dims[p1[0]];
    let perm = |p: &[usize]| Attr::Ints(p.iter().map(|&i| i as i64).collect());
    let tt = b.op("Transpose", &[t], vec![("perm", perm(p1))]);
    let one = b.const_i64(&[1]);
    let u = b.op("Unsqueeze", &[&tt, &one], vec![]);
    let target = if computed_target {
        let head = b.const_i64(&[1, 2]);
        let rest = b.op(
            "Shape",
            &[&tt],
            vec![("start", Attr::Int(1)), ("end", Attr::Int(n as i64))],
        );
        b.op("Concat", &[&head, &rest], vec![("axis", Attr::Int(0))])
    } else {
        let mut v = vec![1, 2];
        v.extend(p1[1..].iter().map(|&a| dims[a] as i64));
        b.const_i64(&v)
    };
    let e = b.op("Expand", &[&u, &target], vec![]);
    let idx = if computed_index {
        let rows = b.op(
            "Shape",
            &[&tt],
            vec![("start", Attr::Int(0)), ("end", Attr::Int(1))],
        );
        let counts = b.op(
            "ConstantOfShape",
            &[&rows],
            vec![("value", Attr::Tensor(TensorData::from_i64(vec![1], &[2])))],
        );
        let max = b.op("ReduceMax", &[&counts], vec![("keepdims", Attr::Int(0))]);
        let max = b.op("Cast", &[&max], vec![("to", Attr::Int(7))]);
        let (zero, step) = (b.scalar_i64(0), b.scalar_i64(1));
        let range = b.op("Range", &[&zero, &max, &step], vec![]);
        let col = b.op("Unsqueeze", &[&counts, &one], vec![]);
        let less = b.op("Less", &[&range, &col], vec![]);
        let nz = b.op("NonZero", &[&less], vec![]);
        b.op("Transpose", &[&nz], vec![("perm", Attr::Ints(vec![1, 0]))])
    } else {
        let v: Vec<i64> = (0..2 * m as i64).flat_map(|k| [k / 2, k % 2]).collect();
        b.constant(TensorData::from_i64(vec![2 * m, 2], &v))
    };
    let g = b.op("GatherND", &[&e, &idx], vec![]);
    b.op("Transpose", &[&g], vec![("perm", perm(p2))])
}

/// A random permutation of `0..n` from `seed`.
fn permutation(n: usize, seed: u64) -> Vec<usize> {
    let mut rng = Rng::new(seed);
    let mut p: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        let j = (rng.unit() * (i + 1) as f64) as usize % (i + 1);
        p.swap(i, j);
    }
    p
}

/// GPT-J's `rotate_every_two(x)` on the last axis of a rank-4 `x`: `(−x[..., 1::2], x[..., 0::2])`
/// stacked on a new last axis and flattened back, the target `[0, 0, 0, −1]` or, when
/// `computed_target`, `Shape(stacked)[0:−2] ++ [−1]` as torch.onnx writes it.
fn rotate_every_two(gb: &mut GraphBuilder, x: &str, computed_target: bool) -> String {
    let (start0, start1, end, axis, two) = (
        gb.const_i64(&[0]),
        gb.const_i64(&[1]),
        gb.const_i64(&[i64::MAX]),
        gb.const_i64(&[3]),
        gb.const_i64(&[2]),
    );
    let odd = gb.op("Slice", &[x, &start1, &end, &axis, &two], vec![]);
    let even = gb.op("Slice", &[x, &start0, &end, &axis, &two], vec![]);
    let neg = gb.op("Neg", &[&odd], vec![]);
    let last = gb.const_i64(&[-1]);
    let u1 = gb.op("Unsqueeze", &[&neg, &last], vec![]);
    let u2 = gb.op("Unsqueeze", &[&even, &last], vec![]);
    let stacked = gb.op("Concat", &[&u1, &u2], vec![("axis", Attr::Int(-1))]);
    let target = if computed_target {
        let dims = gb.op("Shape", &[&stacked], vec![]);
        let (s0, s1, a0) = (gb.const_i64(&[0]), gb.const_i64(&[-2]), gb.const_i64(&[0]));
        let lead = gb.op("Slice", &[&dims, &s0, &s1, &a0], vec![]);
        gb.op("Concat", &[&lead, &last], vec![("axis", Attr::Int(0))])
    } else {
        gb.const_i64(&[0, 0, 0, -1])
    };
    gb.op("Reshape", &[&stacked, &target], vec![])
}

/// `RI(h)` as the applier writes it: `Reshape(Concat(Unsqueeze(h, [n]) twice; axis n),
/// [0, …, 0, 2m])`.
fn pairwise(b: &mut GraphBuilder, h: &str, rank: usize, m: usize) -> String {
    let axes = b.const_i64(&[rank as i64]);
    let u = b.op("Unsqueeze", &[h, &axes], vec![]);
    let c = b.op("Concat", &[&u, &u], vec![("axis", Attr::Int(rank as i64))]);
    let mut target = vec![0; rank - 1];
    target.push(2 * m as i64);
    let target = b.const_i64(&target);
    b.op("Reshape", &[&c, &target], vec![])
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    #[test]
    fn repeat_interleave_subgraph(
        rank in 2usize..5,
        raw in proptest::collection::vec(1usize..4, 4),
        symbolic in any::<bool>(),
        computed_index in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let dims = &raw[..rank];
        let p1 = permutation(rank, seed);
        // p2 takes axis 0 (the repeated one) last, the others in a random order.
        let mut p2: Vec<usize> = permutation(rank - 1, seed ^ 0x5eed).iter().map(|&i| i + 1).collect();
        p2.push(0);
        // Every dim symbolic (named by its axis of t) but the repeated one.
        let name = |a: usize| (symbolic && a != p1[0]).then(|| format!("t{a}"));
        let t_names: Vec<Option<String>> = (0..rank).map(name).collect();
        let out_axes: Vec<usize> = p2.iter().map(|&i| p1[i]).collect();
        let out_names: Vec<Option<String>> = out_axes.iter().map(|&a| name(a)).collect();
        let mut out_dims: Vec<usize> = out_axes.iter().map(|&a| dims[a]).collect();
        *out_dims.last_mut().unwrap() *= 2;
        let mut gb = GraphBuilder::new("g");
        let t = gb.input("t", DType::F32, shape(dims, &t_names));
        gb.output("y", DType::F32, shape(&out_dims, &out_names));
        let y = interleave(&mut gb, &t, dims, &p1, &p2, computed_index, symbolic);
        gb.op_into("Identity", &[&y], vec![], "y");
        let mut rng = Rng::new(seed);
        let values = HashMap::from([("t".to_string(), random_tensor(DType::F32, dims, &mut rng))]);
        prove_on("repeat-interleave", "cpu", gb.finish(), values, 0.0)?;
    }

    #[test]
    fn rotate_pairs_recognition(
        (b, h, s) in (1usize..3, 1usize..4, 1usize..4),
        d in (1usize..9).prop_map(|h| 2 * h),
        symbolic in any::<bool>(),
        from_halves in any::<bool>(),
        computed_target in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let x_names = named(symbolic, &[Some("batch"), None, Some("seq"), None]);
        let f_names = named(symbolic, &[Some("batch"), Some("seq"), None]);
        let mut gb = GraphBuilder::new("g");
        let x = gb.input("x", DType::F32, shape(&[b, h, s, d], &x_names));
        let f = gb.input("f", DType::F32, shape(&[b, s, d / 2], &f_names));
        gb.output("y", DType::F32, shape(&[b, h, s, d], &x_names));
        let one = gb.const_i64(&[1]);
        let factor = |gb: &mut GraphBuilder, op: &str| {
            if from_halves {
                // The first half of a rotate-half table Unsqueeze(Cos(Concat(f, f)), [1]),
                // repeated pairwise.
                let both = gb.op("Concat", &[&f, &f], vec![("axis", Attr::Int(-1))]);
                let table = gb.op(op, &[&both], vec![]);
                let u = gb.op("Unsqueeze", &[&table, &one], vec![]);
                let (zero, half, axis) = (gb.const_i64(&[0]), gb.const_i64(&[d as i64 / 2]), gb.const_i64(&[3]));
                let first = gb.op("Slice", &[&u, &zero, &half, &axis], vec![]);
                pairwise(gb, &first, 4, d / 2)
            } else {
                // Cos of the angles repeated pairwise, unsqueezed on the head axis.
                let angles = pairwise(gb, &f, 3, d / 2);
                let table = gb.op(op, &[&angles], vec![]);
                gb.op("Unsqueeze", &[&table, &one], vec![])
            }
        };
        let cos = factor(&mut gb, "Cos");
        let sin = factor(&mut gb, "Sin");
        let rotated = rotate_every_two(&mut gb, &x, computed_target);
        let a = gb.op("Mul", &[&x, &cos], vec![]);
        let r = gb.op("Mul", &[&rotated, &sin], vec![]);
        let y = gb.op("Add", &[&a, &r], vec![]);
        gb.op_into("Identity", &[&y], vec![], "y");
        let mut rng = Rng::new(seed);
        let values = HashMap::from([
            ("x".to_string(), random_tensor(DType::F32, &[b, h, s, d], &mut rng)),
            ("f".to_string(), random_tensor(DType::F32, &[b, s, d / 2], &mut rng)),
        ]);
        prove_on("rotate-pairs", "cpu", gb.finish(), values, 1e-5)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    #[test]
    fn tile_of_ones_as_expand(
        raw in proptest::collection::vec((1usize..4, 1usize..4, any::<bool>()), 1..4),
        seed in any::<u64>(),
    ) {
        // A constant x with dim 1 where the repeat is not 1, constant repeats: the Expand the
        // rule unites with the Tile folds (Tile does not), so the rewrite shows.
        let x_dims: Vec<usize> = raw.iter().map(|&(d, _, tiled)| if tiled { 1 } else { d }).collect();
        let reps: Vec<usize> = raw.iter().map(|&(_, r, tiled)| if tiled { r } else { 1 }).collect();
        let out: Vec<usize> = x_dims.iter().zip(&reps).map(|(d, r)| d * r).collect();
        let mut rng = Rng::new(seed);
        let n: usize = x_dims.iter().product();
        let v: Vec<f32> = (0..n).map(|_| (rng.unit() * 2.0 - 1.0) as f32).collect();
        let mut gb = GraphBuilder::new("g");
        let x = gb.constant(TensorData::from_f32(x_dims.clone(), &v));
        let a = gb.input("a", DType::F32, shape(&out, &[]));
        gb.output("z", DType::F32, shape(&out, &[]));
        let r: Vec<i64> = reps.iter().map(|&r| r as i64).collect();
        let r = gb.const_i64(&r);
        let t = gb.op("Tile", &[&x, &r], vec![]);
        gb.op_into("Add", &[&t, &a], vec![], "z");
        let values = HashMap::from([("a".to_string(), random_tensor(DType::F32, &out, &mut rng))]);
        prove_on("tile-of-ones-as-expand", "cpu", gb.finish(), values, 0.0)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// GPT-J's partial rotation on `[B, S, H, D]` heads split from a projection `[B, S, H·D]`,
    /// its factors `Reshape(Tile(Unsqueeze(Unsqueeze(h, [2]), [4]), [1, 1, 1, 1, 2]),
    /// [0, 0, 1, −1])` (or an Expand for the Tile) of half caches `h` `[B, S, r/2]`, the
    /// rotated pairs reshaped by a constant or a computed target; or on heads given as such.
    #[test]
    fn rotate_pairs_heads_last(
        (b, s, h) in (1usize..3, 1usize..4, 1usize..4),
        (half_r, extra) in (1usize..4, 1usize..4),
        symbolic in any::<bool>(),
        expand in any::<bool>(),
        computed_target in any::<bool>(),
        split in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let (r, d) = (2 * half_r, 2 * half_r + extra);
        let p_names = named(symbolic, &[Some("batch"), Some("seq"), None]);
        let x_names = named(symbolic, &[Some("batch"), Some("seq"), None, None]);
        let mut gb = GraphBuilder::new("g");
        let proj = gb.input("proj", DType::F32, shape(&[b, s, h * d], &p_names));
        let hc = gb.input("hc", DType::F32, shape(&[b, s, r / 2], &p_names));
        let hs = gb.input("hs", DType::F32, shape(&[b, s, r / 2], &p_names));
        gb.output("y", DType::F32, shape(&[b, s, h, d], &x_names));
        // The heads split from the projection, or a graph input of their own (read through a
        // merging Reshape).
        let x = if split {
            let target = gb.const_i64(&[0, 0, h as i64, d as i64]);
            gb.op("Reshape", &[&proj, &target], vec![])
        } else {
            gb.input("x", DType::F32, shape(&[b, s, h, d], &x_names))
        };
        let factor = |gb: &mut GraphBuilder, half: &str| {
            let (two, four) = (gb.const_i64(&[2]), gb.const_i64(&[4]));
            let v = gb.op("Unsqueeze", &[half, &two], vec![]);
            let w = gb.op("Unsqueeze", &[&v, &four], vec![]);
            let reps = gb.const_i64(&[1, 1, 1, 1, 2]);
            let p = gb.op(if expand { "Expand" } else { "Tile" }, &[&w, &reps], vec![]);
            let t = gb.const_i64(&[0, 0, 1, -1]);
            gb.op("Reshape", &[&p, &t], vec![])
        };
        let cos = factor(&mut gb, &hc);
        let sin = factor(&mut gb, &hs);
        let (zero, rr, big, axis, one) = (
            gb.const_i64(&[0]),
            gb.const_i64(&[r as i64]),
            gb.const_i64(&[i64::MAX]),
            gb.const_i64(&[3]),
            gb.const_i64(&[1]),
        );
        let xr = gb.op("Slice", &[&x, &zero, &rr, &axis, &one], vec![]);
        let pass = gb.op("Slice", &[&x, &rr, &big, &axis, &one], vec![]);
        let rotated = rotate_every_two(&mut gb, &xr, computed_target);
        let a = gb.op("Mul", &[&xr, &cos], vec![]);
        let m = gb.op("Mul", &[&rotated, &sin], vec![]);
        let sum = gb.op("Add", &[&a, &m], vec![]);
        let y = gb.op("Concat", &[&sum, &pass], vec![("axis", Attr::Int(-1))]);
        gb.op_into("Identity", &[&y], vec![], "y");
        let mut rng = Rng::new(seed);
        let values = HashMap::from([
            ("proj".to_string(), random_tensor(DType::F32, &[b, s, h * d], &mut rng)),
            ("x".to_string(), random_tensor(DType::F32, &[b, s, h, d], &mut rng)),
            ("hc".to_string(), random_tensor(DType::F32, &[b, s, r / 2], &mut rng)),
            ("hs".to_string(), random_tensor(DType::F32, &[b, s, r / 2], &mut rng)),
        ]);
        prove_on("rotate-pairs-heads-last", "cpu", gb.finish(), values, 1e-5)?;
    }
}
