//! `mobius run` against hostile command lines, arrays and models: every case fails with the
//! right exit code and one error naming the cause, and writes nothing (no output file, no
//! staging file, nothing outside the output folder).

use std::path::{Path, PathBuf};

use mobius::interp::npy::to_npy;
use mobius::ir::{DType, Dim, Graph, GraphBuilder, Shape, TensorData};
use mobius::ops::Tensor;

use super::check::{fails_with, listing, save_model, unchanged};
use super::common::mobius;

/// `y = x · scale` with `x` f32 of shape `dims`; outputs named `outputs` (each a copy of y).
pub fn scale_graph(dims: Vec<Dim>, scale: f32, outputs: &[&str]) -> Graph {
    let mut b = GraphBuilder::new("g");
    b.input("x", DType::F32, Shape(dims.clone()));
    let c = b.constant(TensorData::from_f32(vec![], &[scale]));
    let y = b.op("Mul", &["x", &c], vec![]);
    for name in outputs {
        b.op_into("Identity", &[&y], vec![], name);
        b.output(name, DType::F32, Shape(dims.clone()));
    }
    b.finish()
}

/// `y = x + w` with `x` f32 `[batch, 3]` and `w` f32 `[batch, 1]`.
fn two_input_graph() -> Graph {
    let mut b = GraphBuilder::new("g");
    b.input(
        "x",
        DType::F32,
        Shape(vec![Dim::sym("batch"), Dim::Fixed(3)]),
    );
    b.input(
        "w",
        DType::F32,
        Shape(vec![Dim::sym("batch"), Dim::Fixed(1)]),
    );
    b.op_into("Add", &["x", "w"], vec![], "y");
    b.output(
        "y",
        DType::F32,
        Shape(vec![Dim::sym("batch"), Dim::Fixed(3)]),
    );
    b.finish()
}

fn floats(shape: Vec<usize>) -> Tensor {
    let n = shape.iter().product();
    Tensor::float(DType::F32, shape, (0..n).map(|i| i as f32).collect())
}

fn write(path: &Path, bytes: &[u8]) -> PathBuf {
    std::fs::write(path, bytes).unwrap();
    path.to_path_buf()
}

/// A work folder with a model `y = 2x` (`x` f32 [2, 3]) and a matching `x.npy`.
struct Work {
    dir: tempfile::TempDir,
    model: PathBuf,
}

impl Work {
    fn new(graph: Graph) -> Work {
        let dir = tempfile::tempdir().unwrap();
        let model = save_model(&dir.path().join("m"), graph);
        write(&dir.path().join("x.npy"), &to_npy(&floats(vec![2, 3])));
        Work { dir, model }
    }

    fn simple() -> Work {
        Work::new(scale_graph(vec![Dim::Fixed(2), Dim::Fixed(3)], 2.0, &["y"]))
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn out(&self) -> PathBuf {
        self.path("out")
    }

    /// `mobius run MODEL ARGS… --output-dir out`.
    fn run(&self, args: &[&str]) -> assert_cmd::Command {
        let mut cmd = mobius();
        cmd.current_dir(self.dir.path())
            .arg("run")
            .arg(&self.model)
            .args(args)
            .arg("--output-dir")
            .arg(self.out());
        cmd
    }

    /// What the work folder holds (the model folder, the inputs; never an output).
    fn before(&self) -> Vec<String> {
        listing(self.dir.path())
    }

    /// Asserts nothing was written: the work folder is as it was and `out` does not exist.
    fn nothing_written(&self, before: &[String]) {
        unchanged(self.dir.path(), before);
        assert!(!self.out().exists(), "the output folder was created");
    }
}

#[test]
fn a_good_run_writes_every_output() {
    let w = Work::simple();
    w.run(&["--input", "x=x.npy"]).assert().success();
    assert_eq!(listing(&w.out()), vec!["y.npy"]);
    let y = mobius::interp::npy::read_npy(&w.out().join("y.npy"), &Default::default()).unwrap();
    assert_eq!(y, {
        let x = floats(vec![2, 3]);
        Tensor::float(
            DType::F32,
            vec![2, 3],
            x.floats().unwrap().iter().map(|v| v * 2.0).collect(),
        )
    });
}

#[test]
fn input_arguments_are_usage_errors() {
    let w = Work::simple();
    let before = w.before();
    for (args, needles) in [
        (vec!["--input", "x.npy"], vec!["expected NAME=FILE.npy"]),
        (vec!["--input", "=x.npy"], vec!["expected NAME=FILE.npy"]),
        (
            vec!["--input", "x=x.npy", "--input", "x=x.npy"],
            vec!["--input `x` is given twice"],
        ),
        (
            vec!["--input", "x=x.npy", "--input", "nope=x.npy"],
            vec!["no input `nope`", "its inputs: x"],
        ),
        (vec![], vec!["missing --input for x"]),
        (
            vec!["--input", "x=x.npy", "--max-tensor-elements", "0"],
            vec!["--max-tensor-elements"],
        ),
    ] {
        fails_with(w.run(&args), 2, &needles);
        w.nothing_written(&before);
    }
}

#[test]
fn missing_inputs_are_named() {
    let w = Work::new(two_input_graph());
    let before = w.before();
    fails_with(
        w.run(&[]),
        2,
        &["missing --input for x, w", "the model takes: x, w"],
    );
    w.nothing_written(&before);
}

#[test]
fn an_array_of_another_dtype_is_refused() {
    let w = Work::simple();
    write(
        &w.path("ints.npy"),
        &to_npy(&Tensor::int(DType::I64, vec![2, 3], vec![0; 6])),
    );
    let before = w.before();
    fails_with(
        w.run(&["--input", "x=ints.npy"]),
        1,
        &["ints.npy", "input `x`", "declares f32", "holds i64"],
    );
    w.nothing_written(&before);
}

#[test]
fn arrays_of_the_wrong_shape_are_refused() {
    let w = Work::simple();
    for (file, shape) in [
        ("rank3.npy", vec![7, 1, 5]),
        ("rank1.npy", vec![6]),
        ("wide.npy", vec![2, 4]),
    ] {
        write(&w.path(file), &to_npy(&floats(shape.clone())));
        let before = w.before();
        let spec = format!("x={file}");
        fails_with(
            w.run(&["--input", &spec]),
            1,
            &[file, "input `x`", "declares [2, 3]", &format!("{shape:?}")],
        );
        w.nothing_written(&before);
    }
}

#[test]
fn one_named_size_cannot_take_two_values() {
    let w = Work::new(two_input_graph());
    write(&w.path("w.npy"), &to_npy(&floats(vec![5, 1])));
    let before = w.before();
    fails_with(
        w.run(&["--input", "x=x.npy", "--input", "w=w.npy"]),
        1,
        &["w.npy", "input `w`", "`batch` is 2 (from input `x`)"],
    );
    w.nothing_written(&before);
}

#[test]
fn output_names_that_leave_the_folder_are_refused_before_running() {
    for name in ["../escaped", "/tmp/mobius-hostile-abs/escaped", ".."] {
        let w = Work::new(scale_graph(
            vec![Dim::Fixed(2), Dim::Fixed(3)],
            2.0,
            &[name],
        ));
        let before = w.before();
        fails_with(
            w.run(&["--input", "x=x.npy"]),
            1,
            &["unsafe path", "graph output name"],
        );
        w.nothing_written(&before);
        assert!(!Path::new("/tmp/mobius-hostile-abs").exists());
        assert!(!w.path("escaped.npy").exists() && !w.path("escaped").exists());
    }
}

#[test]
fn outputs_that_would_share_a_file_are_refused() {
    let w = Work::new(scale_graph(
        vec![Dim::Fixed(2), Dim::Fixed(3)],
        2.0,
        &["Y", "y"],
    ));
    let before = w.before();
    fails_with(w.run(&["--input", "x=x.npy"]), 1, &["`Y` and `y`", "y.npy"]);
    w.nothing_written(&before);
}

#[test]
fn an_output_folder_that_is_a_file_is_refused() {
    let w = Work::simple();
    write(&w.out(), b"my notes");
    let before = w.before();
    fails_with(w.run(&["--input", "x=x.npy"]), 1, &["out", "not a folder"]);
    unchanged(w.dir.path(), &before);
    assert_eq!(std::fs::read(w.out()).unwrap(), b"my notes");
}

#[test]
fn a_folder_in_the_way_of_one_output_leaves_no_partial_set() {
    let w = Work::new(scale_graph(
        vec![Dim::Fixed(2), Dim::Fixed(3)],
        2.0,
        &["a", "b"],
    ));
    std::fs::create_dir_all(w.out().join("b.npy/keep")).unwrap();
    let before = listing(&w.out());
    fails_with(w.run(&["--input", "x=x.npy"]), 1, &["b.npy", "is a folder"]);
    unchanged(&w.out(), &before);
}

#[test]
fn hostile_arrays_are_clean_errors_naming_the_file() {
    let w = Work::simple();
    let header = |dict: &str, data: &[u8]| {
        let mut b = b"\x93NUMPY\x01\x00".to_vec();
        b.extend_from_slice(&(dict.len() as u16).to_le_bytes());
        b.extend_from_slice(dict.as_bytes());
        b.extend_from_slice(data);
        b
    };
    let dict = |descr: &str, fortran: &str, shape: &str| {
        format!("{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': {shape}, }}")
    };
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "truncated.npy",
            b"\x93NUMPY\x01\x00\x40".to_vec(),
            "truncated header",
        ),
        (
            "past_end.npy",
            {
                let mut b = header(&dict("<f4", "False", "(2, 3)"), &[0; 24]);
                b[8..10].copy_from_slice(&60000u16.to_le_bytes());
                b
            },
            "runs past the end of the file",
        ),
        (
            "big_endian.npy",
            header(&dict(">f4", "False", "(2, 3)"), &[0; 24]),
            "big-endian",
        ),
        (
            "fortran.npy",
            header(&dict("<f4", "True", "(2, 3)"), &[0; 24]),
            "Fortran",
        ),
        (
            "strings.npy",
            header(&dict("<U3", "False", "(2, 3)"), &[0; 72]),
            "unsupported dtype",
        ),
        (
            "negative.npy",
            header(&dict("<f4", "False", "(-2, 3)"), &[0; 24]),
            "negative dimension",
        ),
        (
            "huge.npy",
            header(&dict("<f4", "False", "(1099511627776, 3)"), &[0; 24]),
            "--max-tensor-elements",
        ),
        (
            "short.npy",
            header(&dict("<f4", "False", "(2, 3)"), &[0; 20]),
            "needs 24 data bytes, the file holds 20",
        ),
        (
            "long.npy",
            header(&dict("<f4", "False", "(2, 3)"), &[0; 28]),
            "needs 24 data bytes, the file holds 28",
        ),
    ];
    for (file, bytes, needle) in cases {
        write(&w.path(file), &bytes);
        let before = w.before();
        let spec = format!("x={file}");
        fails_with(w.run(&["--input", &spec]), 1, &[file, needle]);
        w.nothing_written(&before);
    }
}

#[test]
fn arrays_over_the_budget_are_refused_before_reading() {
    let w = Work::simple();
    let before = w.before();
    fails_with(
        w.run(&["--input", "x=x.npy", "--max-tensor-elements", "5"]),
        1,
        &["x.npy", "6 elements", "limit of 5", "--max-tensor-elements"],
    );
    w.nothing_written(&before);
}

#[test]
fn a_run_over_the_memory_budget_is_refused() {
    // 512 × 1024 f32 input (2 MiB) against a 1 MiB budget.
    let w = Work::new(scale_graph(
        vec![Dim::Fixed(512), Dim::Fixed(1024)],
        2.0,
        &["y"],
    ));
    write(&w.path("big.npy"), &to_npy(&floats(vec![512, 1024])));
    let before = w.before();
    fails_with(
        w.run(&["--input", "x=big.npy", "--max-memory-mib", "1"]),
        1,
        &["big.npy", "--max-memory-mib"],
    );
    w.nothing_written(&before);
}

#[test]
fn existing_files_are_replaced_only_with_overwrite() {
    let w = Work::simple();
    std::fs::create_dir(w.out()).unwrap();
    write(&w.out().join("y.npy"), b"my results");
    let before = listing(&w.out());
    fails_with(
        w.run(&["--input", "x=x.npy"]),
        1,
        &["y.npy", "exists", "--overwrite"],
    );
    unchanged(&w.out(), &before);
    assert_eq!(std::fs::read(w.out().join("y.npy")).unwrap(), b"my results");
    w.run(&["--input", "x=x.npy", "--overwrite"])
        .assert()
        .success();
    unchanged(&w.out(), &before);
    let y = mobius::interp::npy::read_npy(&w.out().join("y.npy"), &Default::default()).unwrap();
    assert_eq!(y.shape, vec![2, 3]);
}

#[test]
fn inputs_and_the_model_folder_are_never_replaced() {
    // Output `y` written next to the input file y.npy.
    let w = Work::simple();
    let input = to_npy(&floats(vec![2, 3]));
    write(&w.path("y.npy"), &input);
    let before = w.before();
    let mut cmd = mobius();
    cmd.current_dir(w.dir.path())
        .arg("run")
        .arg(&w.model)
        .args(["--input", "x=y.npy", "--overwrite", "--output-dir", "."]);
    fails_with(
        cmd,
        1,
        &["y.npy", "is the file given as --input `x`", "--output-dir"],
    );
    unchanged(w.dir.path(), &before);
    assert_eq!(std::fs::read(w.path("y.npy")).unwrap(), input);
    // An output over a file of the model's folder.
    let w = Work::simple();
    write(&w.path("m/y.npy"), b"shipped with the model");
    let before = listing(&w.path("m"));
    let mut cmd = mobius();
    cmd.current_dir(w.dir.path())
        .arg("run")
        .arg(&w.model)
        .args(["--input", "x=x.npy", "--overwrite", "--output-dir", "m"]);
    fails_with(cmd, 1, &["y.npy", "is a file of the model's folder"]);
    unchanged(&w.path("m"), &before);
    assert_eq!(
        std::fs::read(w.path("m/y.npy")).unwrap(),
        b"shipped with the model"
    );
}

#[test]
fn the_input_arrays_together_are_checked_against_the_memory_budget_before_reading() {
    // x [70000, 3] and w [70000, 1] f32: 840,000 and 280,000 bytes, each under 1 MiB, together
    // over it.
    let w = Work::new(two_input_graph());
    write(&w.path("x.npy"), &to_npy(&floats(vec![70000, 3])));
    write(&w.path("w.npy"), &to_npy(&floats(vec![70000, 1])));
    let before = w.before();
    fails_with(
        w.run(&[
            "--input",
            "x=x.npy",
            "--input",
            "w=w.npy",
            "--max-memory-mib",
            "1",
        ]),
        1,
        &[
            "w.npy",
            "with the arrays read before it",
            "--max-memory-mib",
        ],
    );
    w.nothing_written(&before);
}

/// Makes a FIFO at `path` (`mkfifo`).
#[cfg(unix)]
pub fn fifo(path: &Path) {
    let made = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(made.success(), "mkfifo {}", path.display());
}

#[cfg(unix)]
#[test]
fn inputs_that_are_not_regular_files_are_refused_before_opening() {
    let w = Work::simple();
    fifo(&w.path("pipe.npy"));
    std::os::unix::fs::symlink("/dev/zero", w.path("zero.npy")).unwrap();
    std::fs::create_dir(w.path("folder.npy")).unwrap();
    let before = w.before();
    for name in ["pipe.npy", "zero.npy", "folder.npy"] {
        let mut cmd = w.run(&["--input", &format!("x={name}")]);
        // Opening a FIFO blocks: without the check this would hang, not fail.
        cmd.timeout(std::time::Duration::from_secs(30));
        fails_with(cmd, 1, &[name, "not a regular file"]);
        w.nothing_written(&before);
    }
}
