//! `mobius verify A.onnx B.onnx`: run both models through the reference interpreter on the same
//! random inputs and compare every output.
//!
//! [`contract`] decides which inputs the two models take (and derives the ones only one of them
//! takes), [`inputs`] generates them within the run's budgets, [`compare`] compares outputs
//! without letting NaN or infinity hide a difference.
//!
//! Both models must have the same output names (and at least one), each of the same kind
//! (float, integer or bool) in both; floats of different widths are compared with the looser
//! tolerance of the two. An output with no elements (a size of 0 in `--dims`) compares
//! nothing and is an error, not a pass. Each model's run receives its own copy of the sample's
//! inputs, generated from the same random state and moved into the run, so one sample's inputs
//! are held once at a time.

pub mod compare;
pub mod contract;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use crate::interp::inputs;
use crate::interp::{run_graph_with, Rng};
use crate::ir::{DType, Model};
use crate::limits::InterpLimits;
use crate::onnx::import;
use crate::ops::Tensor;
use crate::rulebook::contrib_functions::ContribFunctions;
use crate::weights::eval::Evaluator;
use crate::{Error, Result};

pub use crate::interp::inputs::{canonical_dim, default_dim, random_inputs, Padding};
pub use compare::{check_tolerance, default_tolerance, OutputDiff};

/// What to compare and how.
#[derive(Debug, Clone)]
pub struct VerifyOptions {
    /// The reference model.
    pub reference: PathBuf,
    /// The model checked against it.
    pub candidate: PathBuf,
    /// Sizes of symbolic dims (`batch`, `sequence_len`, …); unnamed ones use [`default_dim`].
    pub dims: BTreeMap<String, usize>,
    /// How many random input sets (at least 1).
    pub samples: usize,
    /// RNG seed.
    pub seed: u64,
    /// Random 0/1 attention masks (left padding; right padding when either model runs
    /// GroupQueryAttention) instead of all ones.
    pub random_mask: bool,
    /// Absolute tolerance (`None`: by output dtype).
    pub atol: Option<f64>,
    /// Relative tolerance, times the reference's largest finite magnitude (`None`: by output
    /// dtype).
    pub rtol: Option<f64>,
    /// Budgets of each interpreter run (and of the generated inputs).
    pub limits: InterpLimits,
}

/// The verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct VerifyReport {
    /// Per output, in the reference's output order.
    pub outputs: Vec<OutputDiff>,
    /// The dims used.
    pub dims: BTreeMap<String, usize>,
    /// Inputs only one model takes, and how their values were derived.
    pub derived: Vec<String>,
    /// How attention masks were padded.
    pub padding: Padding,
}

impl VerifyReport {
    /// Whether every output is within tolerance.
    pub fn passed(&self) -> bool {
        self.outputs.iter().all(|o| o.within)
    }
}

impl std::fmt::Display for VerifyReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let dims: Vec<String> = self.dims.iter().map(|(k, v)| format!("{k}={v}")).collect();
        writeln!(f, "dims: {}", dims.join(", "))?;
        let padding = match self.padding {
            Padding::None => "none (all ones)",
            Padding::Left => "random, on the left",
            Padding::Right => {
                "random, on the right (GroupQueryAttention); none where a past cache is fed"
            }
        };
        writeln!(f, "mask padding: {padding}")?;
        for d in &self.derived {
            writeln!(f, "derived: {d}")?;
        }
        writeln!(
            f,
            "{:<32} {:>12} {:>12} {:>10} {:>10} {:>10}  verdict",
            "output", "max abs", "max rel", "NaN≠", "atol", "rtol"
        )?;
        for o in &self.outputs {
            writeln!(
                f,
                "{:<32} {:>12.3e} {:>12.3e} {:>10} {:>10.1e} {:>10.1e}  {}",
                o.name,
                o.max_abs,
                o.max_rel,
                o.nan_one_side,
                o.atol,
                o.rtol,
                if o.within { "ok" } else { "DIFFERENT" }
            )?;
        }
        for o in self.outputs.iter().filter(|o| o.nan_one_side > 0) {
            writeln!(
                f,
                "{}: {} positions NaN on one side only",
                o.name, o.nan_one_side
            )?;
        }
        writeln!(
            f,
            "{}",
            if self.passed() {
                "equivalent within tolerance"
            } else {
                "NOT equivalent"
            }
        )
    }
}

/// Checks the options a caller (or the command line) gave: tolerances finite and ≥ 0, at least
/// one sample, every --dims name used by an input of either model.
fn check_options(opts: &VerifyOptions, a: &Model, b: &Model) -> Result<()> {
    for (flag, v) in [("--atol", opts.atol), ("--rtol", opts.rtol)] {
        if let Some(v) = v {
            check_tolerance(flag, v)?;
        }
    }
    if opts.samples == 0 {
        return Err(Error::Usage(
            "--samples 0: at least one sample is needed".into(),
        ));
    }
    let used = contract::dim_names(&[&a.graph, &b.graph]);
    if let Some(unknown) = opts
        .dims
        .keys()
        .find(|k| !used.iter().any(|u| u == canonical_dim(k)))
    {
        return Err(Error::Usage(format!(
            "--dims names `{unknown}`, which no input of either model uses (they use: {})",
            if used.is_empty() {
                "no named sizes".to_string()
            } else {
                used.join(", ")
            }
        )));
    }
    Ok(())
}

/// The inputs of `model` among `all` (the others are dropped).
fn inputs_of(model: &Model, mut all: HashMap<String, Tensor>) -> HashMap<String, Tensor> {
    model
        .graph
        .inputs
        .iter()
        .filter_map(|v| all.remove(&v.name).map(|t| (v.name.clone(), t)))
        .collect()
}

/// Output `name` of a run.
fn output<'r>(run: &'r HashMap<String, Tensor>, name: &str) -> Result<&'r Tensor> {
    run.get(name)
        .ok_or_else(|| Error::Graph(format!("output `{name}` was not computed")))
}

/// The kind of values a dtype holds, which two compared outputs must share.
fn kind(dtype: DType) -> &'static str {
    match dtype {
        DType::Bool => "bool",
        d if d.is_float() => "float",
        _ => "integer",
    }
}

/// Checks that the two models have the same output names, at least one, each of the same kind
/// in both.
fn check_outputs(opts: &VerifyOptions, a: &Model, b: &Model) -> Result<()> {
    if a.graph.outputs.is_empty() {
        return Err(Error::Graph(format!(
            "the reference {} has no outputs: nothing to compare",
            opts.reference.display()
        )));
    }
    let only_in = |x: &Model, y: &Model| -> Vec<String> {
        x.graph
            .outputs
            .iter()
            .filter(|o| !y.graph.outputs.iter().any(|p| p.name == o.name))
            .map(|o| format!("`{}`", o.name))
            .collect()
    };
    for (missing, has, lacks) in [
        (only_in(a, b), &opts.reference, &opts.candidate),
        (only_in(b, a), &opts.candidate, &opts.reference),
    ] {
        if !missing.is_empty() {
            return Err(Error::Graph(format!(
                "{} has outputs {} that {} lacks; the models must have the same outputs",
                has.display(),
                missing.join(", "),
                lacks.display()
            )));
        }
    }
    for o in &a.graph.outputs {
        if let Some(p) = b.graph.outputs.iter().find(|p| p.name == o.name) {
            if kind(o.dtype) != kind(p.dtype) {
                return Err(Error::Graph(format!(
                    "output `{}`: the reference declares {}, the candidate {}; {} and {} values \
                     cannot be compared",
                    o.name,
                    o.dtype,
                    p.dtype,
                    kind(o.dtype),
                    kind(p.dtype)
                )));
            }
        }
    }
    Ok(())
}

/// Compares two models on random inputs.
pub fn verify(opts: &VerifyOptions) -> Result<VerifyReport> {
    let a = import::load(&opts.reference, &ContribFunctions)?;
    let b = import::load(&opts.candidate, &ContribFunctions)?;
    check_options(opts, &a, &b)?;
    check_outputs(opts, &a, &b)?;
    let mut dims: BTreeMap<String, usize> = opts
        .dims
        .iter()
        .map(|(k, v)| (canonical_dim(k).to_string(), *v))
        .collect();
    let plan = contract::reconcile(&a.graph, &b.graph, &mut dims)?;
    let shapes = inputs::checked_shapes(&plan.decls, &mut dims, &opts.limits)?;
    let padding = match (
        opts.random_mask,
        contract::has_gqa(&a.graph) || contract::has_gqa(&b.graph),
    ) {
        (false, _) => Padding::None,
        (true, false) => Padding::Left,
        (true, true) => Padding::Right,
    };
    let mut diffs: Vec<OutputDiff> = a
        .graph
        .outputs
        .iter()
        .map(|o| {
            // The looser default of the two models' dtypes for this output.
            let other = b.graph.outputs.iter().find(|p| p.name == o.name);
            let (atol, rtol) = [Some(o), other]
                .into_iter()
                .flatten()
                .map(|v| default_tolerance(v.dtype))
                .fold((0f64, 0f64), |(x, y), (p, q)| (x.max(p), y.max(q)));
            OutputDiff::new(
                &o.name,
                opts.atol.unwrap_or(atol),
                opts.rtol.unwrap_or(rtol),
            )
        })
        .collect();
    let vocab =
        |name: &str| inputs::vocab_of(&a.graph, name).or_else(|| inputs::vocab_of(&b.graph, name));
    let mut rng = Rng::new(opts.seed);
    // Each model gets the sample's inputs generated from the same random state, moved in.
    let run = |m: &Model, rng: &mut Rng| -> Result<HashMap<String, Tensor>> {
        let all = inputs::fill_inputs(&plan.decls, &shapes, &vocab, rng, padding)?;
        run_graph_with(
            &m.graph,
            inputs_of(m, all),
            &mut Evaluator::new(None),
            &opts.limits,
        )
    };
    for _ in 0..opts.samples {
        let ra = run(&a, &mut rng.clone())?;
        let rb = run(&b, &mut rng)?;
        for d in &mut diffs {
            let (x, y) = (output(&ra, &d.name)?, output(&rb, &d.name)?);
            if x.shape != y.shape {
                return Err(Error::Graph(format!(
                    "output `{}`: shapes {:?} and {:?} differ",
                    d.name, x.shape, y.shape
                )));
            }
            if kind(x.dtype) != kind(y.dtype) {
                return Err(Error::Graph(format!(
                    "output `{}`: the reference computes {}, the candidate {}; {} and {} values \
                     cannot be compared",
                    d.name,
                    x.dtype,
                    y.dtype,
                    kind(x.dtype),
                    kind(y.dtype)
                )));
            }
            if x.numel() == 0 {
                let sizes: Vec<String> = dims.iter().map(|(k, n)| format!("{k}={n}")).collect();
                return Err(Error::Graph(format!(
                    "output `{}` has shape {:?}, no elements, with {}: nothing to compare \
                     (give sizes of at least 1 with --dims)",
                    d.name,
                    x.shape,
                    sizes.join(", ")
                )));
            }
            d.add(&x.as_f64(), &y.as_f64());
        }
    }
    Ok(VerifyReport {
        outputs: diffs,
        dims,
        derived: plan.derived,
        padding,
    })
}
