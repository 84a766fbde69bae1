//! `mobius optimize`: any existing `.onnx` model → the same model optimized for an EP.

use std::path::{Path, PathBuf};

use crate::ep::EpCapabilities;
use crate::ir::{DType, Graph, Model};
use crate::onnx::{export, import};
use crate::opt::declared_dims;
use crate::opt::fingerprint::leaf_values;
use crate::opt::pipeline::check_output_types;
use crate::opt::{optimize, KvCache, Limits, OptimizeOptions, OptimizeReport, Role};
use crate::package::{check_not_over, check_target, StagedOutput};
use crate::passes::quantize::{
    quantize_graph, runs_gather_block_quantized, QuantRequest, QuantSummary,
};
use crate::rulebook::contrib_functions::ContribFunctions;
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
    /// The KV-cache contract the model will run under (`--kv-cache`).
    pub kv_cache: KvCache,
    /// Measure what each rule group changed, for printing the report (`--trace`; see
    /// [`OptimizeOptions::trace`](crate::opt::OptimizeOptions::trace)).
    pub trace: bool,
}

/// Optimizes `opts.input` into `opts.out`; on error nothing is left in `opts.out`. An output
/// folder that is the model's folder or contains it is refused (replacing it would delete the
/// model). The input graph's declared output types are checked against the types inferred on
/// it before rewriting, so an invalid input is reported as such; output dims declared under
/// names of their own are equalities the model's user promises, kept on the output
/// ([`declared_dims`]). Graph errors name the input file.
pub fn optimize_file(opts: &OptimizeFileOptions) -> Result<(OptimizeReport, Option<QuantSummary>)> {
    optimize_checked(opts).map_err(|e| match e {
        Error::Graph(message) => Error::Onnx {
            path: opts.input.clone(),
            message: format!("invalid graph: {message}"),
        },
        other => other,
    })
}

/// `model` with its `com.microsoft::MoE` calls (if any) replaced by their standard form, the
/// dense block whose expert weights are plain MatMul weights (`inline/moe.rules`,
/// `inline/moe_clamped.rules`), so that
/// `--quant` quantizes the experts as `mobius build --quant` does; the optimizer fuses what
/// the target runs afterwards. Only the MoE rules run, for an EP that runs every op but MoE.
fn dense_moe_blocks(model: Model, dtype: DType, opts: &OptimizeFileOptions) -> Result<Model> {
    if !model
        .graph
        .nodes
        .iter()
        .any(|n| n.domain == "com.microsoft" && n.op_type == "MoE")
    {
        return Ok(model);
    }
    let caps = EpCapabilities {
        supports_fused_moe: false,
        ..EpCapabilities::new("default")
    };
    let mut rules = crate::rulebook::rules()?;
    rules
        .rules
        .retain(|r| matches!(r.name.as_str(), "moe-to-dense" | "moe-clamped-to-dense"));
    let options = OptimizeOptions {
        dtype,
        role: opts.role,
        limits: opts.limits,
        fingerprint_leaves: None,
        accuracy_level: None,
        kv_cache: KvCache::AsIs,
        trace: false,
    };
    Ok(optimize(&model, &caps, &options, &rules)?.0)
}

fn optimize_checked(opts: &OptimizeFileOptions) -> Result<(OptimizeReport, Option<QuantSummary>)> {
    check_target(&opts.out, opts.overwrite)?;
    let mut model = import::load(&opts.input, &ContribFunctions)?;
    let declared = declared_dims::reconcile(&mut model.graph)?;
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
    if opts.quant.is_some() {
        model = dense_moe_blocks(model, dtype, opts)?;
    }
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
        kv_cache: opts.kv_cache,
        trace: opts.trace,
    };
    let (mut optimized, report) = crate::rulebook::optimize(&model, &opts.ep, &options)?;
    keep_inputs(&model.graph, &mut optimized.graph);
    declared.restore(&mut optimized.graph);
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
        &ContribFunctions,
    )?;
    staged.commit()?;
    Ok((report, quantization))
}

/// `mobius optimize` keeps the input model's graph inputs, read or not (a rewrite may leave one
/// unread, as `position_ids` under `--kv-cache genai`): callers feed what the model declares,
/// and onnxruntime refuses a feed the model does not declare. Inputs that are also
/// initializers (defaults) stay dropped when unread.
fn keep_inputs(original: &Graph, optimized: &mut Graph) {
    let kept: std::collections::HashSet<&str> =
        optimized.inputs.iter().map(|v| v.name.as_str()).collect();
    let defaults: std::collections::HashSet<&str> = original
        .initializers
        .iter()
        .map(|i| i.name.as_str())
        .collect();
    optimized.inputs = original
        .inputs
        .iter()
        .filter(|v| kept.contains(v.name.as_str()) || !defaults.contains(v.name.as_str()))
        .cloned()
        .collect();
}
