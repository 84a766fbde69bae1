//! `mobius run MODEL --input NAME=FILE.npy … --output-dir DIR`: run a model file with the
//! reference interpreter on `.npy` inputs and write one `.npy` per graph output.
//!
//! Everything is checked before anything is written: the output names (each must be one plain
//! file name, no two the same file), the output folder (a folder or missing, no output file
//! already there unless `overwrite`, and never one that is an input file, the model or a file
//! in the model's folder), the inputs (each graph input given once, by a known name, with the
//! declared dtype and a shape that fits the declared one, named sizes consistent across
//! inputs), the budgets (the input arrays' memory summed from their headers, before their data
//! is read). Outputs are then written as hidden temporary files inside the output folder and
//! put in place only once all of them are written: files they replace are first moved aside,
//! and a failure puts them back and removes the new files, the temporaries and the folder when
//! this run created it, so a failed run never leaves a partial set. The temporaries and a
//! created folder are registered with [`crate::package::interrupt`], so Ctrl-C removes them
//! too; putting the files in place holds the interrupt lock, so it is not cut short.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::interp::npy::{read_npy_within, to_npy};
use crate::interp::run_graph_with;
use crate::ir::{f8e4m3, DType, Dim, Graph, ValueInfo};
use crate::limits::InterpLimits;
use crate::onnx::import;
use crate::ops::Tensor;
use crate::package::interrupt::{remove_entry, staging};
use crate::paths::file_component;
use crate::rulebook::contrib_functions::ContribFunctions;
use crate::verify::canonical_dim;
use crate::weights::eval::Evaluator;
use crate::{Error, Result};

/// What to run and where to write.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The model (external data is read next to it).
    pub model: PathBuf,
    /// `(graph input name, .npy file)` pairs.
    pub inputs: Vec<(String, PathBuf)>,
    /// The folder for the outputs (created when missing).
    pub output_dir: PathBuf,
    /// Replace output files that already exist (never an input file, the model, or a file in
    /// the model's folder).
    pub overwrite: bool,
    /// Budgets of the run (and of the input files).
    pub limits: InterpLimits,
}

/// What a run wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct RunReport {
    /// The output files, in graph output order.
    pub written: Vec<PathBuf>,
}

/// Parses a `NAME=FILE` input argument (the command line's value parser).
pub fn parse_input_spec(text: &str) -> Result<(String, PathBuf)> {
    match text.split_once('=') {
        Some((name, file)) if !name.is_empty() && !file.is_empty() => {
            Ok((name.to_string(), PathBuf::from(file)))
        }
        _ => Err(Error::Usage(format!(
            "`{text}`: expected NAME=FILE.npy (a graph input name and a file)"
        ))),
    }
}

/// The file name of each graph output, in output order: `NAME.npy`, where NAME must be one
/// plain file name and no two names may give the same file (compared without case, as on
/// case-insensitive file systems).
pub fn output_files(graph: &Graph) -> Result<Vec<String>> {
    let mut seen: HashMap<String, &str> = HashMap::new();
    graph
        .outputs
        .iter()
        .map(|o| {
            let file = format!("{}.npy", file_component(&o.name, "graph output name")?);
            if let Some(first) = seen.insert(file.to_lowercase(), &o.name) {
                return Err(Error::UnsafePath(format!(
                    "graph outputs `{first}` and `{}` would both be written as {file}",
                    o.name
                )));
            }
            Ok(file)
        })
        .collect()
}

/// Matches the `--input` pairs to the graph inputs: each given once, by a name the graph has,
/// every graph input given. Returns the file of each graph input, in input order.
fn match_inputs(graph: &Graph, given: &[(String, PathBuf)]) -> Result<Vec<PathBuf>> {
    let names: Vec<&str> = graph.inputs.iter().map(|v| v.name.as_str()).collect();
    let mut by_name: HashMap<&str, &PathBuf> = HashMap::new();
    for (name, file) in given {
        if !names.contains(&name.as_str()) {
            return Err(Error::Usage(format!(
                "--input `{name}`: the model has no input `{name}` (its inputs: {})",
                names.join(", ")
            )));
        }
        if by_name.insert(name, file).is_some() {
            return Err(Error::Usage(format!("--input `{name}` is given twice")));
        }
    }
    let missing: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| !by_name.contains_key(n))
        .collect();
    if !missing.is_empty() {
        return Err(Error::Usage(format!(
            "missing --input for {} (the model takes: {})",
            missing.join(", "),
            names.join(", ")
        )));
    }
    Ok(names.iter().map(|n| by_name[n].clone()).collect())
}

/// Refuses an `--input` path that is not a regular file, links followed, before it is opened:
/// a FIFO or device would block the run or never end.
fn check_regular_input(file: &Path) -> Result<()> {
    let meta = std::fs::metadata(file).map_err(|e| Error::io(file, e))?;
    if meta.is_file() {
        Ok(())
    } else {
        Err(Error::Npy {
            path: file.to_path_buf(),
            message: "not a regular file (an --input must be a .npy file, not a folder, FIFO \
                      or device)"
                .into(),
        })
    }
}

/// A float8 e4m3fn tensor from a `u8` tensor of its raw bytes.
fn float8_from_bytes(t: &Tensor) -> Tensor {
    let bytes = t
        .as_f64()
        .iter()
        .map(|&b| f8e4m3::to_f32(b as u8))
        .collect();
    Tensor::float(DType::F8E4M3FN, t.shape.clone(), bytes)
}

/// Named sizes seen so far: size and the input that fixed it.
type Bound = BTreeMap<String, (usize, String)>;

/// Checks `t` (read from `file`) against the declaration `v`; named sizes are recorded in
/// `bound` and must agree across inputs. Sums (`a + b`) are checked by [`check_sums`].
fn check_input(v: &ValueInfo, t: &Tensor, file: &Path, bound: &mut Bound) -> Result<()> {
    let err = |why: String| Error::Npy {
        path: file.to_path_buf(),
        message: format!("input `{}`: {why}", v.name),
    };
    if t.dtype != v.dtype {
        return Err(err(format!(
            "the model declares {}, the file holds {}",
            v.dtype, t.dtype
        )));
    }
    let shapes = format!(
        "the model declares {}, the file holds {:?}",
        v.shape, t.shape
    );
    if t.shape.len() != v.shape.0.len() {
        return Err(err(shapes));
    }
    for (d, &size) in v.shape.0.iter().zip(&t.shape) {
        match d {
            Dim::Fixed(n) if usize::try_from(*n).ok() != Some(size) => return Err(err(shapes)),
            Dim::Sym(s) if !s.trim().is_empty() && !s.contains(" + ") => {
                let name = canonical_dim(s.trim()).to_string();
                match bound.get(&name) {
                    Some((n, from)) if *n != size => {
                        return Err(err(format!(
                            "{shapes}, but `{name}` is {n} (from input `{from}`)"
                        )))
                    }
                    Some(_) => {}
                    None => {
                        bound.insert(name, (size, v.name.clone()));
                    }
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// Checks the sum dims (`past_seq_len + seq_len`) whose parts are all known.
fn check_sums(
    decls: &[ValueInfo],
    tensors: &[Tensor],
    files: &[PathBuf],
    bound: &Bound,
) -> Result<()> {
    for ((v, t), file) in decls.iter().zip(tensors).zip(files) {
        for (d, &size) in v.shape.0.iter().zip(&t.shape) {
            let Dim::Sym(s) = d else { continue };
            if !s.contains(" + ") {
                continue;
            }
            let parts: Option<Vec<usize>> = s
                .split(" + ")
                .map(|p| bound.get(canonical_dim(p.trim())).map(|(n, _)| *n))
                .collect();
            if let Some(sum) = parts.map(|p| p.iter().fold(0usize, |a, b| a.saturating_add(*b))) {
                if sum != size {
                    return Err(Error::Npy {
                        path: file.clone(),
                        message: format!(
                            "input `{}`: the model declares {}, the file holds {:?}, but `{s}` \
                             is {sum} from the other inputs",
                            v.name, v.shape, t.shape
                        ),
                    });
                }
            }
        }
    }
    Ok(())
}

/// Where a run may not write: the `--input` files, the model and its folder.
struct Protected {
    /// Canonical path and input name of each `--input` file.
    inputs: Vec<(PathBuf, String)>,
    /// The model file, canonical.
    model: Option<PathBuf>,
    /// The model's folder, canonical.
    model_dir: Option<PathBuf>,
}

impl Protected {
    fn new(model: &Path, inputs: &[(String, PathBuf)]) -> Protected {
        let folder = match model.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        Protected {
            inputs: inputs
                .iter()
                .filter_map(|(name, f)| f.canonicalize().ok().map(|p| (p, name.clone())))
                .collect(),
            model: model.canonicalize().ok(),
            model_dir: folder.canonicalize().ok(),
        }
    }

    /// Why the existing file `target` must not be replaced even with `--overwrite`, if so.
    fn reason(&self, target: &Path) -> Option<String> {
        let real = target.canonicalize().ok()?;
        if let Some((_, name)) = self.inputs.iter().find(|(p, _)| *p == real) {
            return Some(format!("is the file given as --input `{name}`"));
        }
        if self.model.as_ref() == Some(&real) {
            return Some("is the model".into());
        }
        if real.parent().is_some() && real.parent() == self.model_dir.as_deref() {
            return Some("is a file of the model's folder".into());
        }
        None
    }
}

/// Whether `dir` can be the output folder: a folder or missing, where no output file name is
/// taken by a folder, an input file, the model or a file of its folder, nor by any file unless
/// `overwrite`.
fn check_output_dir(
    dir: &Path,
    files: &[String],
    overwrite: bool,
    protected: &Protected,
) -> Result<()> {
    match std::fs::metadata(dir) {
        Ok(m) if !m.is_dir() => {
            return Err(Error::Output {
                path: dir.to_path_buf(),
                message: "exists and is not a folder".into(),
            })
        }
        Ok(_) => {}
        Err(_) => return Ok(()),
    }
    for path in files.iter().map(|f| dir.join(f)) {
        if std::fs::symlink_metadata(&path).is_err() {
            continue;
        }
        let message = if path.is_dir() {
            "is a folder, in the way of an output file".to_string()
        } else if let Some(why) = protected.reason(&path) {
            format!("{why}; an output would replace it (choose another --output-dir)")
        } else if !overwrite {
            "exists; mobius run replaces existing files only with --overwrite".to_string()
        } else {
            continue;
        };
        return Err(Error::Output { path, message });
    }
    Ok(())
}

/// The topmost missing folder of `dir` (the one `create_dir_all` creates first), if any.
fn first_missing(dir: &Path) -> Option<PathBuf> {
    dir.ancestors()
        .take_while(|p| !p.as_os_str().is_empty() && !p.exists())
        .last()
        .map(Path::to_path_buf)
}

/// Writes each output as a hidden temporary file in `dir`, registered for the interrupt
/// handler; `staged` receives each temporary as soon as it exists.
fn stage(
    dir: &Path,
    files: &[String],
    outputs: &[&Tensor],
    staged: &mut Vec<PathBuf>,
) -> Result<()> {
    for (file, t) in files.iter().zip(outputs) {
        let tmp = dir.join(format!(".{file}.partial-{}", std::process::id()));
        let mut f = {
            let mut registry = staging();
            let f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&tmp)
                .map_err(|e| Error::io(&tmp, e))?;
            registry.push(tmp.clone());
            f
        };
        staged.push(tmp.clone());
        f.write_all(&to_npy(t))
            .and_then(|()| f.sync_all())
            .map_err(|e| Error::io(&tmp, e))?;
    }
    Ok(())
}

/// Puts the `staged` temporaries in place as `dir/files[i]`, all or nothing: existing files
/// are moved aside first (refused unless `overwrite`), then the temporaries renamed; on a
/// failure the new files are removed and the moved files put back. Called holding the
/// interrupt lock.
fn commit(
    dir: &Path,
    files: &[String],
    staged: &[PathBuf],
    overwrite: bool,
) -> Result<Vec<PathBuf>> {
    let targets: Vec<PathBuf> = files.iter().map(|f| dir.join(f)).collect();
    let exists = |p: &Path| std::fs::symlink_metadata(p).is_ok();
    if !overwrite {
        // Checked again: a file that appeared while the model ran is not replaced either.
        if let Some(path) = targets.iter().find(|p| exists(p)) {
            return Err(Error::Output {
                path: path.clone(),
                message: "exists; mobius run replaces existing files only with --overwrite".into(),
            });
        }
    }
    let mut aside: Vec<(PathBuf, PathBuf)> = Vec::new();
    let mut placed: Vec<PathBuf> = Vec::new();
    let mut put_in_place = || -> Result<()> {
        for (target, file) in targets.iter().zip(files) {
            if exists(target) {
                let backup = dir.join(format!(".{file}.replaced-{}", std::process::id()));
                std::fs::rename(target, &backup).map_err(|e| Error::io(target, e))?;
                aside.push((target.clone(), backup));
            }
        }
        for (tmp, target) in staged.iter().zip(&targets) {
            std::fs::rename(tmp, target).map_err(|e| Error::io(target, e))?;
            placed.push(target.clone());
        }
        Ok(())
    };
    match put_in_place() {
        Ok(()) => {
            for (_, backup) in &aside {
                let _ = std::fs::remove_file(backup);
            }
            Ok(targets)
        }
        Err(e) => {
            for path in &placed {
                let _ = std::fs::remove_file(path);
            }
            let lost: Vec<String> = aside
                .iter()
                .filter(|(target, backup)| std::fs::rename(backup, target).is_err())
                .map(|(target, backup)| {
                    format!("{} is kept as {}", target.display(), backup.display())
                })
                .collect();
            if lost.is_empty() {
                Err(e)
            } else {
                Err(Error::Output {
                    path: dir.to_path_buf(),
                    message: format!(
                        "{e}; could not put back what it replaced: {}",
                        lost.join(", ")
                    ),
                })
            }
        }
    }
}

/// Writes `outputs` as `dir/files[i]`, all or nothing (see the module doc).
fn write_outputs(
    dir: &Path,
    files: &[String],
    outputs: &[&Tensor],
    overwrite: bool,
) -> Result<Vec<PathBuf>> {
    let created = first_missing(dir);
    {
        let mut registry = staging();
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        registry.extend(created.iter().cloned());
    }
    let mut staged: Vec<PathBuf> = Vec::new();
    let written = stage(dir, files, outputs, &mut staged);
    let mut registry = staging();
    let result = written.and_then(|()| commit(dir, files, &staged, overwrite));
    if result.is_err() {
        for tmp in &staged {
            remove_entry(tmp);
        }
        if let Some(top) = &created {
            remove_entry(top);
        }
    }
    registry.retain(|p| !staged.contains(p) && Some(p) != created.as_ref());
    result
}

/// Runs the model of `opts` and writes its outputs.
pub fn run_file(opts: &RunOptions) -> Result<RunReport> {
    let model = import::load(&opts.model, &ContribFunctions)?;
    let graph = &model.graph;
    let files = output_files(graph)?;
    let protected = Protected::new(&opts.model, &opts.inputs);
    check_output_dir(&opts.output_dir, &files, opts.overwrite, &protected)?;
    let paths = match_inputs(graph, &opts.inputs)?;
    let mut bound = Bound::new();
    let mut tensors = Vec::new();
    let mut held = 0u64;
    for file in &paths {
        check_regular_input(file)?;
    }
    for (v, file) in graph.inputs.iter().zip(&paths) {
        let mut t = read_npy_within(file, &opts.limits, &mut held)?;
        if v.dtype == DType::F8E4M3FN && t.dtype == DType::U8 {
            // numpy has no float8: such inputs come as their raw bytes (see `to_npy`).
            t = float8_from_bytes(&t);
        }
        check_input(v, &t, file, &mut bound)?;
        tensors.push(t);
    }
    check_sums(&graph.inputs, &tensors, &paths, &bound)?;
    let inputs: HashMap<String, Tensor> = graph
        .inputs
        .iter()
        .map(|v| v.name.clone())
        .zip(tensors)
        .collect();
    let outputs = run_graph_with(graph, inputs, &mut Evaluator::new(None), &opts.limits)?;
    let ordered: Vec<&Tensor> = graph
        .outputs
        .iter()
        .map(|o| {
            outputs
                .get(&o.name)
                .ok_or_else(|| Error::Graph(format!("graph output `{}` was not computed", o.name)))
        })
        .collect::<Result<_>>()?;
    let written = write_outputs(&opts.output_dir, &files, &ordered, opts.overwrite)?;
    Ok(RunReport { written })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{DType, Shape};

    fn decl(name: &str, dtype: DType, dims: Vec<Dim>) -> ValueInfo {
        ValueInfo::new(name, dtype, Shape(dims))
    }

    fn graph_with_outputs(names: &[&str]) -> Graph {
        Graph {
            outputs: names.iter().map(|n| decl(n, DType::F32, vec![])).collect(),
            ..Graph::default()
        }
    }

    #[test]
    fn input_specs() {
        assert_eq!(
            parse_input_spec("x=a=b.npy").unwrap(),
            ("x".to_string(), PathBuf::from("a=b.npy"))
        );
        for bad in ["x", "=x.npy", "x=", ""] {
            assert!(
                matches!(parse_input_spec(bad), Err(Error::Usage(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn output_names_must_be_plain_distinct_file_names() {
        assert_eq!(
            output_files(&graph_with_outputs(&["logits", "present.0.key"])).unwrap(),
            vec!["logits.npy", "present.0.key.npy"]
        );
        for bad in [
            &["../escaped"][..],
            &["/abs/path"],
            &["."],
            &[".."],
            &[""],
            &["a\0b"],
        ] {
            let e = output_files(&graph_with_outputs(bad)).unwrap_err();
            assert!(matches!(e, Error::UnsafePath(_)), "{bad:?}: {e}");
        }
        let e = output_files(&graph_with_outputs(&["Y", "y"])).unwrap_err();
        assert!(e.to_string().contains("`Y` and `y`"), "{e}");
    }

    #[test]
    fn inputs_are_matched_by_name_once_each() {
        let g = Graph {
            inputs: vec![decl("a", DType::F32, vec![]), decl("b", DType::F32, vec![])],
            ..Graph::default()
        };
        let spec = |pairs: &[(&str, &str)]| -> Vec<(String, PathBuf)> {
            pairs
                .iter()
                .map(|(n, f)| (n.to_string(), PathBuf::from(f)))
                .collect()
        };
        assert_eq!(
            match_inputs(&g, &spec(&[("b", "b.npy"), ("a", "a.npy")])).unwrap(),
            vec![PathBuf::from("a.npy"), PathBuf::from("b.npy")]
        );
        for (pairs, needle) in [
            (spec(&[("a", "1"), ("a", "2"), ("b", "3")]), "given twice"),
            (spec(&[("a", "1"), ("c", "2")]), "no input `c`"),
            (spec(&[("a", "1")]), "missing --input for b"),
        ] {
            let e = match_inputs(&g, &pairs).unwrap_err();
            assert!(
                matches!(e, Error::Usage(_)) && e.to_string().contains(needle),
                "{e}"
            );
        }
    }

    #[test]
    fn a_failed_write_leaves_no_partial_set() {
        let t = tempfile::tempdir().unwrap();
        let y = Tensor::float(DType::F32, vec![1], vec![1.0]);
        let files = ["a.npy".to_string(), "b.npy".to_string()];
        // The second output's temporary name is taken: its write fails after the first one's.
        let blocker = format!(".b.npy.partial-{}", std::process::id());
        let dir = t.path().join("out");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join(&blocker), b"").unwrap();
        assert!(write_outputs(&dir, &files, &[&y, &y], false).is_err());
        let left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(left, vec![blocker.clone()]);
        // A folder the run created (parents included) is removed again.
        let fresh = t.path().join("new/deeper");
        let unwritable = ["a.npy".to_string(), "b\0.npy".to_string()];
        assert!(write_outputs(&fresh, &unwritable, &[&y, &y], false).is_err());
        assert!(!t.path().join("new").exists());
        assert!(write_outputs(&fresh, &files, &[&y, &y], false).is_ok());
        assert!(fresh.join("a.npy").is_file() && fresh.join("b.npy").is_file());
    }

    #[test]
    fn a_failed_commit_puts_back_what_it_replaced() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path();
        std::fs::write(dir.join("a.npy"), b"old a").unwrap();
        std::fs::write(dir.join("b.npy"), b"old b").unwrap();
        let tmp = dir.join(".a.npy.partial-1");
        std::fs::write(&tmp, b"new a").unwrap();
        // The second temporary is missing: its rename fails after the first one's.
        let staged = [tmp, dir.join(".b.npy.partial-1")];
        let files = ["a.npy".to_string(), "b.npy".to_string()];
        let e = commit(dir, &files, &staged, true).unwrap_err();
        assert!(e.to_string().contains("b.npy"), "{e}");
        assert_eq!(std::fs::read(dir.join("a.npy")).unwrap(), b"old a");
        assert_eq!(std::fs::read(dir.join("b.npy")).unwrap(), b"old b");
        let mut left: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, vec!["a.npy", "b.npy"]);
        // Without overwrite an existing file is refused before anything moves.
        let tmp = dir.join(".a.npy.partial-2");
        std::fs::write(&tmp, b"new a").unwrap();
        let e = commit(dir, &files[..1], std::slice::from_ref(&tmp), false).unwrap_err();
        assert!(e.to_string().contains("--overwrite"), "{e}");
        assert_eq!(std::fs::read(dir.join("a.npy")).unwrap(), b"old a");
        assert!(tmp.exists());
    }

    #[test]
    fn input_shapes_fit_the_declaration_and_each_other() {
        let v = decl("x", DType::F32, vec![Dim::sym("batch"), Dim::Fixed(3)]);
        let w = decl("w", DType::F32, vec![Dim::sym("batch")]);
        let t = |shape: Vec<usize>| {
            let n = shape.iter().product();
            Tensor::float(DType::F32, shape, vec![0.0; n])
        };
        let f = Path::new("x.npy");
        let mut bound = Bound::new();
        check_input(&v, &t(vec![2, 3]), f, &mut bound).unwrap();
        let e = check_input(&w, &t(vec![5]), f, &mut bound)
            .unwrap_err()
            .to_string();
        assert!(e.contains("`batch` is 2 (from input `x`)"), "{e}");
        for shape in [vec![7, 1, 5], vec![2, 4], vec![2]] {
            let e = check_input(&v, &t(shape), f, &mut Bound::new())
                .unwrap_err()
                .to_string();
            assert!(e.contains("input `x`") && e.contains("[batch, 3]"), "{e}");
        }
        let ints = Tensor::int(DType::I64, vec![2, 3], vec![0; 6]);
        let e = check_input(&v, &ints, f, &mut Bound::new())
            .unwrap_err()
            .to_string();
        assert!(e.contains("declares f32, the file holds i64"), "{e}");
        // Sums are checked once their parts are known.
        let m = decl("m", DType::F32, vec![Dim::sym("past_seq_len + seq_len")]);
        let bound = Bound::from([
            ("past_sequence_len".to_string(), (3, "p".to_string())),
            ("sequence_len".to_string(), (4, "q".to_string())),
        ]);
        let files = [PathBuf::from("m.npy")];
        assert!(check_sums(std::slice::from_ref(&m), &[t(vec![7])], &files, &bound).is_ok());
        let e = check_sums(&[m], &[t(vec![6])], &files, &bound)
            .unwrap_err()
            .to_string();
        assert!(e.contains("is 7 from the other inputs"), "{e}");
    }
}
