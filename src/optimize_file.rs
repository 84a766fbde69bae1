//! `mobius optimize`: any existing `.onnx` model → the same model optimized for an EP.

use std::path::{Path, PathBuf};

use crate::ep::EpCapabilities;
use crate::ir::DType;
use crate::onnx::{export, import};
use crate::opt::fingerprint::leaf_values;
use crate::opt::pipeline::check_output_types;
use crate::opt::{optimize, Limits, OptimizeOptions, OptimizeReport, Role};
use crate::package::{check_not_over, check_target, StagedOutput};
use crate::quant::pass::{quantize_graph, runs_gather_block_quantized, QuantRequest, QuantSummary};
use crate::weights::eval::Evaluator;
use crate::{Error, Result};

/// Everything `mobius optimize` needs.
#[derive(Debug, Clone)]
pub struct OptimizeFileOptions {
    /// The model file.
    pub input: PathBuf,
    /// The output folder (model.onnx + model.onnx.data).
    pub out: PathBuf,
    /// Target EP.
    pub ep: EpCapabilities,
    /// Model dtype; `None` = the dtype of the first floating-point graph output.
    pub dtype: Option<DType>,
    /// Model role.
    pub role: Role,
    /// Replace a non-empty output folder.
    pub overwrite: bool,
    /// Saturation limits.
    pub limits: Limits,
    /// Check every rewrite on concrete values (random inputs, the model's weights).
    pub verify_rewrites: bool,
    /// Quantize the MatMul weights (`--quant`).
    pub quant: Option<QuantRequest>,
    /// `accuracy_level` of fused `MatMulNBits` (`None`: the EP's default).
    pub accuracy_level: Option<u8>,
    /// Measure what each rule group changed, for printing the report (`--trace`; see
    /// [`OptimizeOptions::trace`](crate::opt::OptimizeOptions::trace)).
    pub trace: bool,
}

/// Optimizes `opts.input` into `opts.out`; on error nothing is left in `opts.out`. An output
/// folder that is the model's folder or contains it is refused (replacing it would delete the
/// model). The input graph's declared output types are checked against the types inferred on
/// it before rewriting, so an invalid input is reported as such; graph errors name the input
/// file.
pub fn optimize_file(opts: &OptimizeFileOptions) -> Result<(OptimizeReport, Option<QuantSummary>)> {
    optimize_checked(opts).map_err(|e| match e {
        Error::Graph(message) => Error::Onnx {
            path: opts.input.clone(),
            message: format!("invalid graph: {message}"),
        },
        other => other,
    })
}

fn optimize_checked(opts: &OptimizeFileOptions) -> Result<(OptimizeReport, Option<QuantSummary>)> {
    check_target(&opts.out, opts.overwrite)?;
    let mut model = import::load(&opts.input)?;
    check_output_types(&model.graph, "the input graph")?;
    let model_dir = match opts.input.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    check_not_over(&opts.out, model_dir, "model folder")?;
    let dtype = match opts.dtype {
        Some(d) => d,
        None => model
            .graph
            .outputs
            .iter()
            .map(|o| o.dtype)
            .find(|d| d.is_float())
            .ok_or_else(|| Error::Onnx {
                path: opts.input.clone(),
                message:
                    "no floating-point graph output to take the model dtype from; pass --dtype"
                        .into(),
            })?,
    };
    let quantization = match &opts.quant {
        Some(request) => Some(quantize_graph(
            &mut model.graph,
            request,
            runs_gather_block_quantized(&opts.ep, dtype),
        )?),
        None => None,
    };
    let options = OptimizeOptions {
        dtype,
        role: opts.role,
        limits: opts.limits,
        fingerprint_leaves: if opts.verify_rewrites {
            Some(leaf_values(&model.graph, &mut Evaluator::new(None))?)
        } else {
            None
        },
        accuracy_level: opts.accuracy_level,
        trace: opts.trace,
    };
    let (optimized, report) = optimize(&model, &opts.ep, &options)?;
    let opset = optimized.opsets.get("").copied().unwrap_or(0);
    let blocked = optimized
        .graph
        .nodes
        .iter()
        .any(|n| n.op_type == "DequantizeLinear" && n.attrs.contains_key("block_size"));
    if blocked && opset < 21 {
        return Err(Error::Onnx {
            path: opts.input.clone(),
            message: format!(
                "the model imports opset {opset}; its quantized weights (from --quant, or the \
                 standard form of com.microsoft::MatMulNBits) on ep '{}' need DequantizeLinear \
                 with block_size (opset 21 or later): re-export the model with opset 21+, or \
                 target an EP that runs com.microsoft::MatMulNBits",
                opts.ep.name
            ),
        });
    }
    let staged = StagedOutput::create(&opts.out)?;
    let mut evaluator = Evaluator::new(None);
    export::save(
        &optimized,
        staged.dir(),
        &mut evaluator,
        &indicatif::ProgressBar::hidden(),
    )?;
    staged.commit()?;
    Ok((report, quantization))
}
