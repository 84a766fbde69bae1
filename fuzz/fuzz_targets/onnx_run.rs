//! Fuzzes the reference interpreter on decoded models (what `mobius run` and `mobius verify`
//! do with a hostile `.onnx`): a model that [`mobius::onnx::import::decode`] accepts is run with
//! [`mobius::interp::run_graph_with`] within tight [`InterpLimits`], on inputs shaped as the
//! graph declares them. Errors are fine; a panic, an abort, running out of memory (libFuzzer's
//! -rss_limit_mb) or a timeout (-timeout) is a bug.
//!
//! Models whose initializers live in external files are skipped: the run reads no files (the
//! `onnx_import` target covers external references).

#![no_main]

use std::collections::HashMap;
use std::path::Path;

use libfuzzer_sys::fuzz_target;
use mobius::interp::run_graph_with;
use mobius::ir::{Dim, Graph, TensorSource};
use mobius::limits::InterpLimits;
use mobius::ops::Tensor;
use mobius::rulebook::contrib_functions::ContribFunctions;
use mobius::weights::eval::Evaluator;

/// Budgets small enough that no iteration holds more than a few MiB.
const LIMITS: InterpLimits = InterpLimits {
    max_tensor_elements: 1 << 16,
    max_run_bytes: 64 << 20,
    max_loop_iterations: 1 << 10,
};

/// The size given to every symbolic dimension (`batch`, `sequence_len`, ...); a sum of them
/// (`past_sequence_len + sequence_len`) is that many times larger, so the inputs of a decoder
/// with a KV cache agree.
const SYMBOLIC_DIM: usize = 2;

/// Deterministic small values for every graph input, or `None` when a declared shape is over
/// the budget (the interpreter would refuse it; building it first would allocate it).
fn inputs_for(graph: &Graph) -> Option<HashMap<String, Tensor>> {
    let mut inputs = HashMap::new();
    for v in &graph.inputs {
        let shape: Vec<usize> = v
            .shape
            .0
            .iter()
            .map(|d| match d {
                Dim::Fixed(n) => usize::try_from(*n).unwrap_or(0),
                Dim::Sym(s) => SYMBOLIC_DIM * s.split('+').count(),
            })
            .collect();
        let n = LIMITS.elements(&v.name, &shape).ok()?;
        let t = if v.dtype.is_float() {
            let values = (0..n).map(|i| (i % 7) as f32 / 4.0 - 0.75).collect();
            Tensor::float(v.dtype, shape, values)
        } else if v.dtype == mobius::ir::DType::Bool {
            Tensor::bool(shape, (0..n).map(|i| i % 3 != 0).collect())
        } else {
            Tensor::int(v.dtype, shape, (0..n).map(|i| (i % 3) as i64).collect())
        };
        inputs.insert(v.name.clone(), t);
    }
    Some(inputs)
}

fuzz_target!(|data: &[u8]| {
    let Ok(model) = mobius::onnx::import::decode(
        data,
        Path::new("fuzz-model-dir/model.onnx"),
        &ContribFunctions,
    ) else {
        return;
    };
    let graph = &model.graph;
    let reads_files = graph
        .initializers
        .iter()
        .any(|i| matches!(i.source, Some(TensorSource::External { .. })));
    if reads_files {
        return;
    }
    let Some(inputs) = inputs_for(graph) else {
        return;
    };
    let _ = run_graph_with(graph, inputs, &mut Evaluator::new(None), &LIMITS);
});
