//! The rule loader (errors name file and line) and the cleanup rules' effect on small graphs
//! built with the IR builder.

use std::collections::BTreeMap;

use mobius::ep::get_ep;
use mobius::ir::{Attr, DType, Graph, GraphBuilder, Model, Shape, TensorData, TensorSource};
use mobius::opt::rules::{parse_rules, Stage};
use mobius::opt::{Limits, OptimizeOptions, Role};
use mobius::rulebook::optimize;

fn model(graph: Graph) -> Model {
    Model {
        graph,
        opsets: BTreeMap::from([(String::new(), 24)]),
        ir_version: 11,
        producer_name: "test".into(),
        producer_version: "0".into(),
    }
}

/// Options of an f32 decoder optimization under `limits`, measuring the rule groups when `trace`.
fn options(limits: Limits, trace: bool) -> OptimizeOptions {
    OptimizeOptions {
        dtype: DType::F32,
        role: Role::Decoder,
        limits,
        fingerprint_leaves: None,
        accuracy_level: None,
        kv_cache: mobius::opt::KvCache::AsIs,
        trace,
    }
}

fn run(graph: Graph, limits: Limits) -> (Graph, mobius::opt::OptimizeReport) {
    let opts = options(limits, true);
    let (m, report) = optimize(&model(graph), &get_ep("default").unwrap(), &opts).unwrap();
    (m.graph, report)
}

fn parse_err(text: &str) -> String {
    parse_rules("test.rules", text, &mobius::rulebook::VOCABULARY)
        .unwrap_err()
        .to_string()
}

const GOOD: &str =
    "rule r\n group G\n stage cleanup\n gate always\n pattern (Identity ?x)\n replace ?x\n";

#[test]
fn embedded_rules_load() {
    let rules = mobius::rulebook::rules().unwrap().rules;
    assert!(rules.len() >= 5);
    for r in &rules {
        let folder = match r.stage {
            Stage::Cleanup => "cleanup",
            Stage::Recognize => "recognize",
            Stage::Fusion => "fusion",
            Stage::Inline => "inline",
            Stage::Lowering => "lowering",
        };
        assert!(
            r.origin.starts_with(&format!("rewrites/{folder}/")),
            "{} is a {folder} rule outside rewrites/{folder}/",
            r.origin
        );
    }
    for r in &rules {
        r.rewrite().unwrap();
    }
}

#[test]
fn malformed_rules_name_file_and_line() {
    assert_eq!(
        parse_rules("test.rules", GOOD, &mobius::rulebook::VOCABULARY)
            .unwrap()
            .len(),
        1
    );
    let cases = [
        (
            GOOD.replace(" group G\n", " color G\n"),
            "test.rules:2",
            "unknown field `color`",
        ),
        (
            GOOD.replace("(Identity ?x)", "(Frobnicate ?x)"),
            "test.rules:5",
            "Frobnicate",
        ),
        (
            GOOD.replace(" replace ?x\n", " when no-such-check ?x\n replace ?x\n"),
            "test.rules:6",
            "unknown condition",
        ),
        (
            GOOD.replace(" replace ?x\n", " replace ?y\n"),
            "test.rules:1",
            "?y",
        ),
        (
            GOOD.replace(" replace ?x\n", " when skip-fits-input ?x\n replace ?x\n"),
            "test.rules:1",
            "condition `skip-fits-input` takes 2 variables, not 1",
        ),
        (
            GOOD.replace(" replace ?x\n", " when rank-2-or-3 ?y\n replace ?x\n"),
            "test.rules:1",
            "condition `rank-2-or-3` uses ?y, which the pattern does not bind",
        ),
        (
            GOOD.replace(" replace ?x\n", " apply compose-transposes\n"),
            "test.rules:1",
            "applier `compose-transposes` reads ?p, which the pattern does not bind",
        ),
        (
            GOOD.replace("always", "supports_time_travel"),
            "test.rules:4",
            "unknown gate",
        ),
        (
            GOOD.replace("cleanup", "later"),
            "test.rules:3",
            "unknown stage",
        ),
        (
            GOOD.replace(" pattern (Identity ?x)\n", ""),
            "test.rules:1",
            "no `pattern`",
        ),
        (
            GOOD.replace(" replace ?x\n", " apply nothing-like-this\n"),
            "test.rules:6",
            "unknown applier",
        ),
        (format!("group G\n{GOOD}"), "test.rules:1", "outside a rule"),
        (
            GOOD.replace(" gate always\n", " gate always\n gate always\n"),
            "test.rules:5",
            "given twice",
        ),
        (
            GOOD.replace("(Identity ?x)", "?x"),
            "test.rules:5",
            "rooted",
        ),
    ];
    for (text, at, what) in cases {
        let msg = parse_err(&text);
        assert!(
            msg.contains(at) && msg.contains(what),
            "expected `{at}` and `{what}` in: {msg}"
        );
    }
}

/// x → Identity → Transpose → Transpose(inverse) → Cast(to own dtype) → Reshape(own shape)
///   → Unsqueeze → Squeeze (same axes) → Relu → y
fn noisy_graph() -> Graph {
    let mut b = GraphBuilder::new("g");
    let x = b.input("x", DType::F32, Shape::new([2i64, 3, 4]));
    b.input("unused", DType::F32, Shape::new([1i64]));
    b.input("past_key_values.0.key", DType::F32, Shape::new([1i64]));
    b.output("y", DType::F32, Shape::new([2i64, 3, 4]));
    let i = b.op("Identity", &[&x], vec![]);
    let t1 = b.op(
        "Transpose",
        &[&i],
        vec![("perm", Attr::Ints(vec![2, 0, 1]))],
    );
    let t2 = b.op(
        "Transpose",
        &[&t1],
        vec![("perm", Attr::Ints(vec![1, 2, 0]))],
    );
    let c = b.op("Cast", &[&t2], vec![("to", Attr::Int(1))]);
    let shape = b.const_i64(&[2, 3, 4]);
    let r = b.op("Reshape", &[&c, &shape], vec![]);
    let axes = b.const_i64(&[0]);
    let u = b.op("Unsqueeze", &[&r, &axes], vec![]);
    let s = b.op("Squeeze", &[&u, &axes], vec![]);
    b.op_into("Relu", &[&s], vec![], "y");
    b.finish()
}

#[test]
fn cleanup_removes_no_ops_and_dead_inputs() {
    let (g, report) = run(noisy_graph(), Limits::default());
    let ops: Vec<&str> = g.nodes.iter().map(|n| n.op_type.as_str()).collect();
    assert_eq!(ops, ["Relu"], "{g:#?}");
    assert_eq!(g.nodes[0].inputs, ["x"]);
    let inputs: Vec<&str> = g.inputs.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(
        inputs,
        ["x", "past_key_values.0.key"],
        "unused dropped, KV cache kept"
    );
    assert!(g.initializers.is_empty(), "unused constants dropped");
    let text = report.to_string();
    assert!(
        text.contains("[EP Trace]   Cleanup: 8 → 1 nodes (-7)"),
        "{text}"
    );
}

#[test]
fn transposes_compose_when_they_do_not_cancel() {
    let mut b = GraphBuilder::new("g");
    let x = b.input("x", DType::F32, Shape::new([2i64, 3, 4]));
    b.output("y", DType::F32, Shape::new([4i64, 2, 3]));
    let t1 = b.op(
        "Transpose",
        &[&x],
        vec![("perm", Attr::Ints(vec![1, 0, 2]))],
    );
    b.op_into(
        "Transpose",
        &[&t1],
        vec![("perm", Attr::Ints(vec![2, 1, 0]))],
        "y",
    );
    let (g, _) = run(b.finish(), Limits::default());
    assert_eq!(g.nodes.len(), 1);
    // out[i] = x[p[q[i]]] with p = [1,0,2], q = [2,1,0] → [2,0,1]
    assert_eq!(g.nodes[0].attrs["perm"], Attr::Ints(vec![2, 0, 1]));
}

#[test]
fn constant_subgraphs_fold_into_initializers() {
    let mut b = GraphBuilder::new("g");
    let x = b.input("x", DType::I64, Shape::new([3i64]));
    b.output("y", DType::I64, Shape::new([3i64]));
    let a = b.const_i64(&[1, 2, 3]);
    let two = b.const_i64(&[2]);
    let doubled = b.op("Mul", &[&a, &two], vec![]);
    let shifted = b.op("Add", &[&doubled, &two], vec![]);
    b.op_into("Add", &[&x, &shifted], vec![], "y");
    let (g, _) = run(b.finish(), Limits::default());
    assert_eq!(g.nodes.len(), 1, "{g:#?}");
    let folded = g
        .initializers
        .iter()
        .find(|i| i.name == g.nodes[0].inputs[1])
        .unwrap();
    match &folded.source {
        Some(TensorSource::Inline(t)) => assert_eq!(t, &TensorData::from_i64(vec![3], &[4, 6, 8])),
        other => panic!("not folded: {other:?}"),
    }
}

#[test]
fn an_output_that_is_an_input_keeps_its_name() {
    let mut b = GraphBuilder::new("g");
    let x = b.input("x", DType::F32, Shape::new([2i64]));
    b.output("y", DType::F32, Shape::new([2i64]));
    b.op_into("Identity", &[&x], vec![], "y");
    let (g, _) = run(b.finish(), Limits::default());
    assert_eq!(g.nodes.len(), 1);
    assert_eq!(
        (g.nodes[0].op_type.as_str(), g.nodes[0].outputs[0].as_str()),
        ("Identity", "y")
    );
}

#[test]
fn hitting_a_limit_still_gives_a_valid_graph_and_says_so() {
    let limits = Limits {
        iterations: 1,
        ..Limits::default()
    };
    let (g, report) = run(noisy_graph(), limits);
    g.validate().unwrap();
    assert!(g.nodes.len() < 8, "one iteration already removes something");
    let text = report.to_string();
    assert!(text.contains("stopped early"), "{text}");
}

#[test]
fn onnx_standard_refuses_contrib_ops_it_cannot_expand() {
    let mut b = GraphBuilder::new("g");
    let x = b.input("x", DType::F32, Shape::new([2i64]));
    b.output("y", DType::F32, Shape::new([2i64]));
    b.node(
        "com.microsoft",
        "QuickGelu",
        &[&x],
        vec![],
        vec!["y".into()],
    );
    let opts = options(Limits::default(), false);
    let graph = b.finish();
    let err = optimize(
        &model(graph.clone()),
        &get_ep("onnx-standard").unwrap(),
        &opts,
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("onnx-standard") && err.contains("QuickGelu"),
        "{err}"
    );
    let (m, _) = optimize(&model(graph), &get_ep("cpu").unwrap(), &opts).unwrap();
    assert_eq!(
        m.opsets.get("com.microsoft"),
        Some(&1),
        "contrib import added when used"
    );
}

/// The skip-norm fusions take a residual Add only where the skip has the input's size dim for
/// dim (or a batch of 1, which onnxruntime's kernels broadcast): an input that broadcasts
/// against the skip, or dims named apart (an export's inputs named independently), keep the
/// Add and the norm. Equal ranks were once enough.
#[test]
fn skip_norm_fusions_need_a_skip_of_the_inputs_size() {
    let dim = |d: &str| match d.parse::<i64>() {
        Ok(n) => mobius::ir::Dim::Fixed(n),
        Err(_) => mobius::ir::Dim::sym(d),
    };
    for (input, skip, fused) in [
        (["batch", "seq"], ["batch", "seq"], true),
        (["batch", "seq"], ["1", "seq"], true),
        (["1", "seq"], ["batch", "seq"], false),
        (["batch", "seq"], ["batch_skip", "seq"], false),
        (["batch", "1"], ["batch", "seq"], false),
    ] {
        let mut b = GraphBuilder::new("g");
        let shape = |d: [&str; 2]| Shape::new([dim(d[0]), dim(d[1]), mobius::ir::Dim::Fixed(8)]);
        let x = b.input("x", DType::F32, shape(input));
        let y = b.input("y", DType::F32, shape(skip));
        let w = b.input("w", DType::F32, Shape::new([8i64]));
        let sum = b.op("Add", &[&x, &y], vec![]);
        let unknown = || mobius::ir::Dim::sym("");
        let out = Shape::new([unknown(), unknown(), mobius::ir::Dim::Fixed(8)]);
        b.output("norm", DType::F32, out);
        b.op_into(
            "RMSNormalization",
            &[&sum, &w],
            vec![("axis", Attr::Int(-1))],
            "norm",
        );
        let opts = options(Limits::default(), false);
        let (m, _) = optimize(&model(b.finish()), &get_ep("cpu").unwrap(), &opts).unwrap();
        let fusions = m
            .graph
            .op_counts()
            .get("com.microsoft::SkipSimplifiedLayerNormalization")
            .copied();
        assert_eq!(
            fusions.is_some(),
            fused,
            "input {input:?}, skip {skip:?}: {:?}",
            m.graph.op_counts()
        );
    }
}

/// Every `.rules` file under `rewrites/` is one the optimizer loads, and the reverse: a rule
/// file left out of `RULE_FILES` would be ignored silently.
#[test]
fn the_rule_files_on_disk_are_the_loaded_ones() {
    fn walk(dir: &std::path::Path, root: &std::path::Path, found: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, root, found);
            } else if path.extension().is_some_and(|e| e == "rules") {
                let rel = path.strip_prefix(root).unwrap();
                found.push(rel.to_str().unwrap().replace('\\', "/"));
            }
        }
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("rewrites");
    let mut on_disk = Vec::new();
    walk(&root, &root, &mut on_disk);
    on_disk.sort();
    let mut loaded: Vec<String> = mobius::rulebook::RULE_FILES
        .iter()
        .map(|(name, _)| name.to_string())
        .collect();
    loaded.sort();
    assert_eq!(on_disk, loaded);
}
