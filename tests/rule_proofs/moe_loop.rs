//! Proofs of the sparse-loop MoE recognition (`rewrites/recognize/moe_loop.rules`): the block
//! exactly as TorchScript traces transformers 4.57's loop over the experts (the optimum-onnx
//! export of `tests/fixtures/qwen3_moe`, node for node: `Shape`/`Gather` dims, router
//! `Softmax → Cast → TopK → (÷ Σ) → Cast`, `Transpose(OneHot, [2, 1, 0])`, per expert
//! `NonZero`/`Split`/`Squeeze` hits, the SwiGLU expert on the gathered tokens, the weight
//! column `Gather(Flatten(Unsqueeze(w, [2])), j + t·k)`, the `index_add_` as
//! `ScatterElements` into zeros plus `Add`), random batch, sequence, width, expert width,
//! number of experts, top-k, renormalisation, the unrolled steps in any order of the experts
//! — rewritten into the dense block and compared through the reference interpreter. And a
//! trace missing an expert's step (an example input that did not hit it) is not read.

use std::collections::HashMap;

use mobius::interp::Rng;
use mobius::ir::{Attr, DType, Graph, GraphBuilder, Initializer, TensorData, TensorSource};
use mobius::ops::Tensor;
use proptest::prelude::*;

use super::moe::{bytes, sizes, values, Sizes};
use super::{dims, model, optimize_with_rules, options_for, prove_on, prove_with, rule};

/// An f32 initializer `name` of `shape` with random values in `[-scale, scale)`.
fn weight(
    b: &mut GraphBuilder,
    name: &str,
    shape: Vec<usize>,
    scale: f64,
    rng: &mut Rng,
) -> String {
    let v = values(shape.iter().product(), scale, DType::F32, rng);
    b.initializer(Initializer {
        name: name.into(),
        dtype: DType::F32,
        shape: shape.clone(),
        source: Some(TensorSource::Inline(TensorData {
            dtype: DType::F32,
            shape,
            bytes: bytes(&v, DType::F32),
        })),
    })
}

/// The traced loop of `sizes` over the experts of `steps` (in that order; all E of them, or
/// fewer as a trace that missed some), with input x and output y `[B, S, H]`.
fn expert_loop(
    (batch, seq, h, i, e, k): Sizes,
    normalize: bool,
    steps: &[usize],
    seed: u64,
) -> (Graph, HashMap<String, Tensor>) {
    scaled_expert_loop((batch, seq, h, i, e, k), normalize, steps, 1.2, seed)
}

/// [`expert_loop`] with the experts' weights in `[-scale, scale)`.
fn scaled_expert_loop(
    (batch, seq, h, i, e, k): Sizes,
    normalize: bool,
    steps: &[usize],
    scale: f64,
    seed: u64,
) -> (Graph, HashMap<String, Tensor>) {
    let mut rng = Rng::new(seed);
    let mut b = GraphBuilder::new("g");
    let f32_code = Attr::Int(DType::F32.onnx_code() as i64);
    let x = b.input("x", DType::F32, dims(&[batch, seq, h]));
    b.output("y", DType::F32, dims(&[batch, seq, h]));
    let shape = b.op("Shape", &[&x], vec![]);
    let dim = |b: &mut GraphBuilder, j: i64| {
        let at = b.scalar_i64(j);
        b.op("Gather", &[&shape, &at], vec![("axis", Attr::Int(0))])
    };
    let (d0, d1, d2) = (dim(&mut b, 0), dim(&mut b, 1), dim(&mut b, 2));
    let zero_axis = b.const_i64(&[0]);
    let minus_one = b.const_i64(&[-1]);
    let unsq = |b: &mut GraphBuilder, v: &str| b.op("Unsqueeze", &[v, &zero_axis], vec![]);
    let d2u = unsq(&mut b, &d2);
    let flat = b.op("Concat", &[&minus_one, &d2u], vec![("axis", Attr::Int(0))]);
    let tokens = b.op("Reshape", &[&x, &flat], vec![]);
    let wr = weight(&mut b, "gate", vec![h, e], 2.0, &mut rng);
    let logits = b.op("MatMul", &[&tokens, &wr], vec![]);
    let probs = b.op("Softmax", &[&logits], vec![("axis", Attr::Int(1))]);
    let probs = b.op("Cast", &[&probs], vec![("to", f32_code.clone())]);
    let kk = b.const_i64(&[k as i64]);
    let (p, picked) = (b.fresh_name("TopK"), b.fresh_name("TopK"));
    b.node(
        "",
        "TopK",
        &[&probs, &kk],
        vec![
            ("axis", Attr::Int(-1)),
            ("largest", Attr::Int(1)),
            ("sorted", Attr::Int(1)),
        ],
        vec![p.clone(), picked.clone()],
    );
    let rw = if normalize {
        let last = b.const_i64(&[-1]);
        let sum = b.op("ReduceSum", &[&p, &last], vec![("keepdims", Attr::Int(1))]);
        b.op("Div", &[&p, &sum], vec![])
    } else {
        p
    };
    let rw = b.op("Cast", &[&rw], vec![("to", f32_code.clone())]);
    let bs = b.op("Mul", &[&d0, &d1], vec![]);
    let bsu = unsq(&mut b, &bs);
    let d2v = unsq(&mut b, &d2);
    let acc_shape = b.op("Concat", &[&bsu, &d2v], vec![("axis", Attr::Int(0))]);
    let zero = Attr::Tensor(TensorData {
        dtype: DType::F32,
        shape: vec![1],
        bytes: 0f32.to_le_bytes().to_vec(),
    });
    let mut acc = b.op(
        "ConstantOfShape",
        &[&acc_shape],
        vec![("value", zero.clone())],
    );
    let depth = b.scalar_i64(e as i64);
    let on_off = b.const_i64(&[0, 1]);
    let one_hot = b.op(
        "OneHot",
        &[&picked, &depth, &on_off],
        vec![("axis", Attr::Int(-1))],
    );
    let mask = b.op(
        "Transpose",
        &[&one_hot],
        vec![("perm", Attr::Ints(vec![2, 1, 0]))],
    );
    let lifted = b.op("Unsqueeze", &[&tokens, &zero_axis], vec![]);
    let mut experts = Vec::new();
    for j in 0..e {
        let wg = weight(&mut b, &format!("e{j}.gate"), vec![h, i], scale, &mut rng);
        let wu = weight(&mut b, &format!("e{j}.up"), vec![h, i], scale, &mut rng);
        let wd = weight(&mut b, &format!("e{j}.down"), vec![i, h], scale, &mut rng);
        experts.push([wg, wu, wd]);
    }
    for &j in steps {
        let [wg, wu, wd] = &experts[j];
        let at = b.scalar_i64(j as i64);
        let row = b.op("Gather", &[&mask, &at], vec![("axis", Attr::Int(0))]);
        let row = b.op(
            "Cast",
            &[&row],
            vec![("to", Attr::Int(DType::Bool.onnx_code() as i64))],
        );
        let nz = b.op("NonZero", &[&row], vec![]);
        let pairs = b.op("Transpose", &[&nz], vec![("perm", Attr::Ints(vec![1, 0]))]);
        let ones = b.const_i64(&[1, 1]);
        let (s0, s1) = (b.fresh_name("Split"), b.fresh_name("Split"));
        b.node(
            "",
            "Split",
            &[&pairs, &ones],
            vec![("axis", Attr::Int(1))],
            vec![s0.clone(), s1.clone()],
        );
        let one = b.const_i64(&[1]);
        let slot = b.op("Squeeze", &[&s0, &one], vec![]);
        let token = b.op("Squeeze", &[&s1, &one], vec![]);
        let picked_tokens = b.op("Gather", &[&lifted, &token], vec![("axis", Attr::Int(1))]);
        let d2w = unsq(&mut b, &d2);
        let flat_j = b.op("Concat", &[&minus_one, &d2w], vec![("axis", Attr::Int(0))]);
        let z = b.op("Reshape", &[&picked_tokens, &flat_j], vec![]);
        let gate = b.op("MatMul", &[&z, wg], vec![]);
        let sig = b.op("Sigmoid", &[&gate], vec![]);
        let act = b.op("Mul", &[&gate, &sig], vec![]);
        let up = b.op("MatMul", &[&z, wu], vec![]);
        let hidden = b.op("Mul", &[&act, &up], vec![]);
        let out = b.op("MatMul", &[&hidden, wd], vec![]);
        let two = b.const_i64(&[2]);
        let lifted_w = b.op("Unsqueeze", &[&rw, &two], vec![]);
        let ws = b.op("Shape", &[&lifted_w], vec![]);
        let at1 = b.const_i64(&[1]);
        let at2 = b.const_i64(&[2]);
        let width = b.op("Gather", &[&ws, &at1], vec![("axis", Attr::Int(0))]);
        let unit = b.op("Gather", &[&ws, &at2], vec![("axis", Attr::Int(0))]);
        let flat_w = b.op("Flatten", &[&lifted_w], vec![("axis", Attr::Int(2))]);
        let scaled = b.op("Mul", &[&token, &width], vec![]);
        let index = b.op("Add", &[&slot, &scaled], vec![]);
        let col = b.op("Gather", &[&flat_w, &index], vec![("axis", Attr::Int(0))]);
        let ishape = b.op("Shape", &[&index], vec![]);
        let t1 = b.op("Concat", &[&minus_one, &unit], vec![("axis", Attr::Int(0))]);
        let col = b.op("Reshape", &[&col, &t1], vec![]);
        let t2 = b.op("Concat", &[&ishape, &unit], vec![("axis", Attr::Int(0))]);
        let col = b.op("Reshape", &[&col, &t2], vec![]);
        let contribution = b.op("Mul", &[&out, &col], vec![]);
        let contribution = b.op("Cast", &[&contribution], vec![("to", f32_code.clone())]);
        let (starts, ends, axes) = (
            b.const_i64(&[0, 0]),
            b.const_i64(&[1, i64::MAX]),
            b.const_i64(&[0, 1]),
        );
        let head = b.op("Slice", &[&acc, &starts, &ends, &axes], vec![]);
        let head = b.op("Shape", &[&head], vec![]);
        let update = b.op("Expand", &[&contribution, &head], vec![]);
        let column = b.op("Unsqueeze", &[&token, &one], vec![]);
        let ushape = b.op("Shape", &[&update], vec![]);
        let idx = b.op("Expand", &[&column, &ushape], vec![]);
        let ashape = b.op("Shape", &[&acc], vec![]);
        let zeros = b.op("ConstantOfShape", &[&ashape], vec![("value", zero.clone())]);
        let scattered = b.op(
            "ScatterElements",
            &[&zeros, &idx, &update],
            vec![("axis", Attr::Int(0))],
        );
        acc = b.op("Add", &[&acc, &scattered], vec![]);
    }
    let (u0, u1, u2) = (unsq(&mut b, &d0), unsq(&mut b, &d1), unsq(&mut b, &d2));
    let back = b.op("Concat", &[&u0, &u1, &u2], vec![("axis", Attr::Int(0))]);
    b.op_into("Reshape", &[&acc, &back], vec![], "y");
    let xs = values(batch * seq * h, 1.0, DType::F32, &mut rng);
    let input = Tensor::float(DType::F32, vec![batch, seq, h], xs);
    (b.finish(), HashMap::from([("x".to_string(), input)]))
}

/// Sizes and an order of all the experts.
fn sizes_and_order() -> impl Strategy<Value = (Sizes, Vec<usize>)> {
    sizes().prop_flat_map(|s| (Just(s), Just((0..s.4).collect::<Vec<_>>()).prop_shuffle()))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn moe_expert_loop_recognition(
        (sizes, order) in sizes_and_order(),
        normalize in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let (graph, inputs) = expert_loop(sizes, normalize, &order, seed);
        prove_on("moe-expert-loop", "default", graph, inputs, 1e-5)?;
    }

    /// A trace that missed an expert (its step absent) computes something else than the
    /// block: the rule leaves it as it is.
    #[test]
    fn moe_expert_loop_missing_an_expert_is_not_read(
        ((sizes, order), dropped) in sizes_and_order()
            .prop_filter("two experts or more", |(s, _)| s.4 >= 2)
            .prop_flat_map(|(s, o)| (Just((s, o)), 0..s.4)),
        normalize in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let steps: Vec<usize> = order.into_iter().filter(|&j| j != dropped).collect();
        let (graph, _) = expert_loop(sizes, normalize, &steps, seed);
        let caps = mobius::ep::get_ep("default").unwrap();
        let options = options_for(DType::F32, None);
        let run = |rules: &[_]| optimize_with_rules(&model(graph.clone()), &caps, &options, rules)
            .map(|(m, _)| m.graph.op_counts());
        let with = run(&[rule("moe-expert-loop")]).unwrap();
        let without = run(&[]).unwrap();
        prop_assert_eq!(with, without);
    }
}

/// Experts too wide for constant folding (each part over 8,192 elements): the recognized
/// block's stacks stay Concats of initializers, which the MoE fusion joins into one fc1 and
/// one fc2 Concat, folded into initializers and re-laid out when the graph is lowered; the
/// result runs as `com.microsoft::MoE` and equals the traced loop.
#[test]
fn moe_expert_loop_wide_experts_run_as_moe() {
    let sizes = (1, 3, 128, 96, 4, 2);
    let (graph, inputs) = scaled_expert_loop(sizes, true, &[2, 0, 3, 1], 0.1, 7);
    let rules = vec![rule("moe-expert-loop"), rule("dense-moe")];
    let caps = mobius::ep::get_ep("cpu").unwrap();
    let options = options_for(DType::F32, None);
    let (rewritten, _) =
        optimize_with_rules(&model(graph.clone()), &caps, &options, &rules).unwrap();
    let counts = rewritten.graph.op_counts();
    assert_eq!(counts.get("com.microsoft::MoE"), Some(&1), "{counts:?}");
    prove_with(&rule("moe-expert-loop"), rules, "cpu", graph, inputs, 1e-5).unwrap();
}
