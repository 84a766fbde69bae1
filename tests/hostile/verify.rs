//! `mobius verify` against hostile command lines and models: NaN never equals a number, bad
//! usage and inputs the models cannot share are exit 2 with one error naming the cause, budgets
//! are checked before inputs are generated, and two builds of one checkpoint that differ only
//! in contract-derivable inputs (GroupQueryAttention builds take no `position_ids`) verify.
//! verify writes nothing: every case also checks that its work folder is unchanged.

use std::path::{Path, PathBuf};

use mobius::ir::{DType, Dim, Graph, GraphBuilder, Shape, TensorData};

use super::check::save_model;
use super::check::{fails_with, listing, unchanged};
use super::common::{fixture, mobius};
use super::run::scale_graph;

/// `y = (x · a) · b` with `x` f32 of shape `dims` and scalar constants `a`, `b`.
fn two_scales(dims: Vec<Dim>, a: f32, b: f32) -> Graph {
    let mut g = GraphBuilder::new("g");
    g.input("x", DType::F32, Shape(dims.clone()));
    let ca = g.constant(TensorData::from_f32(vec![], &[a]));
    let cb = g.constant(TensorData::from_f32(vec![], &[b]));
    let t = g.op("Mul", &["x", &ca], vec![]);
    g.op_into("Mul", &[&t, &cb], vec![], "y");
    g.output("y", DType::F32, Shape(dims));
    g.finish()
}

fn fixed(dims: &[i64]) -> Vec<Dim> {
    dims.iter().map(|&d| Dim::Fixed(d)).collect()
}

/// A work folder holding models `a/model.onnx` and `b/model.onnx`.
struct Pair {
    dir: tempfile::TempDir,
}

impl Pair {
    fn new(a: Graph, b: Graph) -> Pair {
        let dir = tempfile::tempdir().unwrap();
        save_model(&dir.path().join("a"), a);
        save_model(&dir.path().join("b"), b);
        Pair { dir }
    }

    fn model(&self, which: &str) -> PathBuf {
        self.dir.path().join(which).join("model.onnx")
    }

    fn verify(&self, args: &[&str]) -> assert_cmd::Command {
        let mut cmd = mobius();
        cmd.current_dir(self.dir.path())
            .arg("verify")
            .arg(self.model("a"))
            .arg(self.model("b"))
            .args(args);
        cmd
    }

    /// Every file under the work folder (verify must not add any).
    fn files(&self) -> Vec<String> {
        let mut all = listing(self.dir.path());
        for sub in ["a", "b"] {
            all.extend(
                listing(&self.dir.path().join(sub))
                    .into_iter()
                    .map(|f| format!("{sub}/{f}")),
            );
        }
        all
    }
}

/// Runs `cmd`, expecting exit code `code`; returns stdout.
fn stdout_of(mut cmd: assert_cmd::Command, code: i32) -> String {
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{stdout}{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    stdout
}

#[test]
fn nan_is_never_equal_to_a_number() {
    // x · 0 (zeros) against (x · ∞) · 0 (NaN everywhere).
    let dims = fixed(&[2, 3]);
    let p = Pair::new(
        two_scales(dims.clone(), 1.0, 0.0),
        two_scales(dims, f32::INFINITY, 0.0),
    );
    let before = p.files();
    for (a, b) in [("a", "b"), ("b", "a")] {
        let mut cmd = mobius();
        cmd.arg("verify").arg(p.model(a)).arg(p.model(b));
        let text = stdout_of(cmd, 1);
        assert!(
            text.contains("NOT equivalent")
                && text.contains("DIFFERENT")
                && text.contains("y: 18 positions NaN on one side only"),
            "{text}"
        );
    }
    assert_eq!(p.files(), before);
}

#[test]
fn nan_equals_nan_and_an_infinity_only_itself() {
    let dims = fixed(&[2, 3]);
    let nan = two_scales(dims.clone(), f32::INFINITY, 0.0);
    let p = Pair::new(nan.clone(), nan);
    let text = stdout_of(p.verify(&[]), 0);
    assert!(text.contains("equivalent within tolerance"), "{text}");

    let inf = two_scales(dims.clone(), f32::INFINITY, 1.0);
    let p = Pair::new(inf.clone(), inf);
    stdout_of(p.verify(&[]), 0);

    let p = Pair::new(
        two_scales(dims.clone(), f32::INFINITY, 1.0),
        two_scales(dims, f32::INFINITY, -1.0),
    );
    let text = stdout_of(p.verify(&[]), 1);
    assert!(
        text.contains("inf") && text.contains("NOT equivalent"),
        "{text}"
    );
}

#[test]
fn bad_usage_is_exit_2() {
    let dims = vec![Dim::sym("batch"), Dim::Fixed(3)];
    let p = Pair::new(
        scale_graph(dims.clone(), 2.0, &["y"]),
        scale_graph(dims, 2.0, &["y"]),
    );
    let before = p.files();
    for (args, needles) in [
        (
            vec!["--atol=-1"],
            vec!["--atol", "tolerance must be a finite number"],
        ),
        (
            vec!["--rtol=nan"],
            vec!["--rtol", "tolerance must be a finite number"],
        ),
        (
            vec!["--atol=inf"],
            vec!["--atol", "tolerance must be a finite number"],
        ),
        (vec!["--atol=x"], vec!["--atol", "not a number"]),
        (vec!["--samples", "0"], vec!["--samples"]),
        (vec!["--dims", "batch"], vec!["--dims", "expected NAME=N"]),
        (
            vec!["--dims", "batch=two"],
            vec!["--dims", "`two` is not a size"],
        ),
        (vec!["--dims", "=3"], vec!["--dims", "name is empty"]),
        (
            vec!["--dims", "batch=1,batch=2"],
            vec!["`batch` is given twice"],
        ),
        (
            vec!["--dims", "batch=1,,"],
            vec!["--dims", "expected NAME=N"],
        ),
        (
            vec!["--dims", "batchsize=2"],
            vec!["--dims names `batchsize`", "they use: batch"],
        ),
        (
            vec!["--max-tensor-elements", "0"],
            vec!["--max-tensor-elements"],
        ),
        (vec!["--max-memory-mib=-1"], vec!["--max-memory-mib"]),
    ] {
        fails_with(p.verify(&args), 2, &needles);
        assert_eq!(p.files(), before);
    }
}

#[test]
fn inputs_the_models_cannot_share_are_refused_naming_both_declarations() {
    let batch = |n: i64| vec![Dim::sym("batch"), Dim::Fixed(n)];
    for (a, b, needles) in [
        (
            scale_graph(batch(7), 1.0, &["y"]),
            scale_graph(batch(5), 1.0, &["y"]),
            vec!["input `x`", "f32 [batch, 7]", "f32 [batch, 5]"],
        ),
        (
            scale_graph(batch(7), 1.0, &["y"]),
            scale_graph(vec![Dim::sym("batch")], 1.0, &["y"]),
            vec!["input `x`", "f32 [batch, 7]", "f32 [batch]"],
        ),
        (
            // One named size facing two different fixed sizes.
            {
                let mut g = GraphBuilder::new("g");
                g.input("x", DType::F32, Shape(vec![Dim::sym("n")]));
                g.input("z", DType::F32, Shape(vec![Dim::sym("n")]));
                g.op_into("Add", &["x", "z"], vec![], "y");
                g.output("y", DType::F32, Shape(vec![Dim::sym("n")]));
                g.finish()
            },
            {
                let mut g = GraphBuilder::new("g");
                g.input("x", DType::F32, Shape(fixed(&[4])));
                g.input("z", DType::F32, Shape(fixed(&[5])));
                g.op_into("Add", &["x", "z"], vec![], "y");
                g.output("y", DType::F32, Shape(fixed(&[4])));
                g.finish()
            },
            vec!["input `z`", "f32 [n]", "f32 [5]", "n is 4"],
        ),
    ] {
        let p = Pair::new(a, b);
        let before = p.files();
        fails_with(p.verify(&[]), 2, &needles);
        assert_eq!(p.files(), before);
    }
}

#[test]
fn input_budgets_are_checked_before_generating() {
    let seq = vec![Dim::sym("batch"), Dim::sym("sequence_len")];
    let p = Pair::new(
        scale_graph(seq.clone(), 1.0, &["y"]),
        scale_graph(seq, 1.0, &["y"]),
    );
    let before = p.files();
    for (args, needles) in [
        (
            vec!["--dims", "sequence_len=2147483648"],
            vec![
                "input `x`",
                "sequence_len=2147483648",
                "limit of 268435456",
                "--max-tensor-elements",
            ],
        ),
        (
            vec!["--dims", "batch=1099511627776"],
            vec!["input `x`", "batch=1099511627776", "--max-tensor-elements"],
        ),
        (
            vec!["--dims", "batch=4294967296,sequence_len=4294967296"],
            vec!["input `x`", "over 2^64", "--max-tensor-elements"],
        ),
        (
            vec!["--max-tensor-elements", "6"],
            vec![
                "input `x`",
                "7 elements",
                "limit of 6",
                "--max-tensor-elements",
            ],
        ),
        (
            vec!["--dims", "sequence_len=400000", "--max-memory-mib", "1"],
            vec!["input `x`", "--max-memory-mib"],
        ),
    ] {
        fails_with(p.verify(&args), 2, &needles);
        assert_eq!(p.files(), before);
    }
    // Declared fixed sizes are checked the same way.
    let huge = fixed(&[1 << 40]);
    let p = Pair::new(
        scale_graph(huge.clone(), 1.0, &["y"]),
        scale_graph(huge, 1.0, &["y"]),
    );
    fails_with(
        p.verify(&[]),
        2,
        &["input `x`", "[1099511627776]", "--max-tensor-elements"],
    );
}

/// Builds the llama fixture for `ep` in `dtype` into `dir/name` and returns its model path.
fn build_llama(dir: &Path, name: &str, ep: &str, dtype: &str) -> PathBuf {
    let out = dir.join(name);
    mobius()
        .args(["build", "-q", "--config"])
        .arg(fixture("llama"))
        .arg(&out)
        .args(["--ep", ep, "--dtype", dtype])
        .assert()
        .success();
    out.join("model.onnx")
}

#[test]
fn builds_of_one_checkpoint_verify_across_the_decoder_contract() {
    let t = tempfile::tempdir().unwrap();
    let portable = build_llama(t.path(), "portable", "default", "f32");
    let cpu = build_llama(t.path(), "cpu", "cpu", "f32");
    let cuda = build_llama(t.path(), "cuda", "cuda", "f32");
    let cuda16 = build_llama(t.path(), "cuda16", "cuda", "f16");
    let before = listing(t.path());
    let verify = |a: &Path, b: &Path, args: &[&str]| {
        let mut cmd = mobius();
        cmd.arg("verify").arg(a).arg(b).args(args);
        cmd
    };
    // The GroupQueryAttention build takes no position_ids: derived from the mask.
    for (a, b, lacking) in [
        (&portable, &cpu, "candidate"),
        (&cpu, &portable, "reference"),
    ] {
        for args in [
            vec![],
            vec!["--random-mask"],
            vec![
                "--random-mask",
                "--dims",
                "batch=3,past_sequence_len=0,sequence_len=6",
            ],
            vec!["--dims", "batch=2,past_sequence_len=4,sequence_len=1"],
        ] {
            let text = stdout_of(verify(a, b, &args), 0);
            assert!(
                text.contains(&format!(
                    "derived: position_ids ({lacking} lacks it: positions from attention_mask)"
                )) && text.contains("equivalent within tolerance"),
                "{args:?}: {text}"
            );
            if args.contains(&"--random-mask") {
                assert!(
                    text.contains("mask padding: random, on the right"),
                    "{text}"
                );
            }
        }
    }
    // Both standard-Attention builds take the same inputs; random masks pad on the left.
    let text = stdout_of(verify(&portable, &cuda, &["--random-mask"]), 0);
    assert!(
        !text.contains("derived:") && text.contains("mask padding: random, on the left"),
        "{text}"
    );
    // Inputs that differ otherwise (the f16 cache) are refused, naming the input.
    fails_with(
        verify(&portable, &cuda16, &[]),
        2,
        &[
            "input `past_key_values.0.key`",
            "f32 [batch, 2, past_sequence_len, 16]",
            "f16 [batch, 2, past_sequence_len, 16]",
        ],
    );
    unchanged(t.path(), &before);
}

/// `y = Add(position_ids, position_ids)` beside an `attention_mask` declared `mask`: the
/// graph reads positions only, so generating them from a mask of another form indexed past it.
fn mask_and_positions(mask_dtype: DType, mask: Vec<Dim>, positions: Vec<Dim>) -> Graph {
    let mut g = GraphBuilder::new("g");
    g.input("attention_mask", mask_dtype, Shape(mask));
    g.input("position_ids", DType::I64, Shape(positions.clone()));
    g.op_into("Add", &["position_ids", "position_ids"], vec![], "y");
    g.output("y", DType::I64, Shape(positions));
    g.finish()
}

#[test]
fn masks_and_positions_of_another_form_are_refused_naming_the_input() {
    for (graph, needles) in [
        (
            mask_and_positions(DType::I64, fixed(&[1, 2]), fixed(&[1, 7])),
            vec![
                "input `position_ids`",
                "7 positions where `attention_mask` covers only 2 tokens",
            ],
        ),
        (
            mask_and_positions(DType::I64, fixed(&[1, 2, 3]), fixed(&[1, 2])),
            vec!["input `attention_mask`", "not of rank 2"],
        ),
        (
            mask_and_positions(DType::F32, fixed(&[1, 7]), fixed(&[1, 7])),
            vec!["input `attention_mask`", "f32", "not integers"],
        ),
        (
            mask_and_positions(DType::I64, fixed(&[2, 7]), fixed(&[1, 7])),
            vec!["input `position_ids`", "a batch of 1 where"],
        ),
    ] {
        let p = Pair::new(graph.clone(), graph);
        let before = p.files();
        fails_with(p.verify(&[]), 2, &needles);
        assert_eq!(p.files(), before);
    }
}

#[test]
fn nothing_compared_is_not_a_pass() {
    let dims = vec![Dim::sym("n")];
    // Both compute nothing with n = 0: an error, not "equivalent".
    let p = Pair::new(
        scale_graph(dims.clone(), 1.0, &["y"]),
        scale_graph(dims, 5.0, &["y"]),
    );
    let before = p.files();
    fails_with(
        p.verify(&["--dims", "n=0"]),
        2,
        &["output `y`", "no elements", "n=0", "nothing to compare"],
    );
    assert_eq!(p.files(), before);
    // A negative declared size.
    let neg = scale_graph(fixed(&[2, -3]), 1.0, &["y"]);
    let p = Pair::new(neg.clone(), neg);
    fails_with(p.verify(&[]), 2, &["input `x`", "negative size -3"]);
    // A reference without outputs.
    let mut empty = GraphBuilder::new("g");
    empty.input("x", DType::F32, Shape(fixed(&[2])));
    let p = Pair::new(empty.finish(), scale_graph(fixed(&[2]), 1.0, &["y"]));
    fails_with(p.verify(&[]), 2, &["has no outputs", "nothing to compare"]);
}

#[test]
fn outputs_must_be_the_same_names_and_kinds() {
    let dims = fixed(&[2, 3]);
    // The candidate has an output the reference lacks.
    let p = Pair::new(
        scale_graph(dims.clone(), 2.0, &["y"]),
        scale_graph(dims.clone(), 2.0, &["y", "extra"]),
    );
    let before = p.files();
    fails_with(
        p.verify(&[]),
        2,
        &["b/model.onnx has outputs `extra`", "a/model.onnx lacks"],
    );
    assert_eq!(p.files(), before);
    // A bool output against a float one.
    let as_bool = {
        let mut g = GraphBuilder::new("g");
        g.input("x", DType::F32, Shape(dims.clone()));
        let zero = g.constant(TensorData::from_f32(vec![], &[0.0]));
        g.op_into("Greater", &["x", &zero], vec![], "y");
        g.output("y", DType::Bool, Shape(dims.clone()));
        g.finish()
    };
    let p = Pair::new(scale_graph(dims, 1.0, &["y"]), as_bool);
    fails_with(
        p.verify(&[]),
        2,
        &["output `y`", "f32", "bool", "cannot be compared"],
    );
}
