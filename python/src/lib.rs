//! `mobius._mobius`: the native half of the `mobius` Python package.
//!
//! Thin glue over the `mobius` crate: every call runs the library's own functions (the ones the
//! CLI runs), so a package built here is byte for byte the CLI's. Long calls (build, save,
//! optimize, verify, cost) run on a worker thread while the calling thread waits without the
//! GIL, forwards the library's log events to Python `logging` and polls for signals: Ctrl-C
//! sets the call's [`Cancel`] flag, the library stops at its next check and removes what it
//! staged, and the `KeyboardInterrupt` is raised. Library errors become Python exceptions with
//! the CLI's message; a panic becomes a `RuntimeError`, never an abort.
//!
//! The public API, its argument checks and docstrings live in the Python modules beside this
//! crate (`python/mobius/`); this module's functions are private (`_mobius`).

use std::collections::{BTreeMap, BTreeSet};
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, RecvTimeoutError};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use mobius::cost_file::{cost_file, CostOptions};
use mobius::ep::{
    ep_json, ep_registry, get_ep, register_ep, register_ep_file, target_ep, EpCapabilities,
};
use mobius::ir::{DType, QuantParams};
use mobius::limits::InterpLimits;
use mobius::opt::Limits;
use mobius::optimize_file::{optimize_file, OptimizeFileOptions};
use mobius::passes::quantize::QuantRequest;
use mobius::source::{HubSettings, ModelSource};
use mobius::verify::{verify, VerifyOptions};
use mobius::{BuildOptions, Cancel, Features, ModelPackage, SaveOptions};
use pyo3::exceptions::{
    PyFileNotFoundError, PyKeyboardInterrupt, PyOSError, PyRuntimeError, PyValueError,
};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use serde_json::Value;
use tracing::{Level, Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

/// mimalloc for the library's allocations, as in the CLI: the optimizer makes and frees
/// millions of small objects, and the weight writer's blocks come and go (glibc's malloc made
/// `save` take ~13% more CPU than the CLI's build, scripts/bench_python.py).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Hands the memory the graph phase freed back to the system once a build is done, as the CLI
/// does before it saves (the library's own release, `malloc_trim`, reaches glibc's heap only).
fn release_freed_memory() {
    extern "C" {
        fn mi_collect(force: bool);
    }
    // SAFETY: mi_collect takes no pointer; it frees and purges mimalloc's own unused pages.
    unsafe { mi_collect(true) }
}

/// How long the waiting thread sleeps (without the GIL) between log forwarding and signal
/// checks; the result wakes it at once.
const POLL: Duration = Duration::from_millis(50);

// ---------------------------------------------------------------------------------------------
// Errors

/// The Python exception for a library error, carrying the CLI's message: `ValueError` for bad
/// requests and bad input (unknown EP or dtype, invalid capabilities, unsupported or malformed
/// configs, exceeded limits), `FileNotFoundError`/`OSError` for files and sources,
/// `KeyboardInterrupt` for a cancelled call, `RuntimeError` for the rest.
fn py_error(e: mobius::Error) -> PyErr {
    use mobius::Error as E;
    let message = e.to_string();
    match e {
        E::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            PyFileNotFoundError::new_err(message)
        }
        E::Io { .. } | E::Output { .. } | E::Source(_) => PyOSError::new_err(message),
        E::Interrupted => PyKeyboardInterrupt::new_err(message),
        E::Usage(_)
        | E::UnknownEp { .. }
        | E::InvalidEp { .. }
        | E::EpFile { .. }
        | E::Json { .. }
        | E::ConfigField { .. }
        | E::UnsupportedModelType { .. }
        | E::Safetensors { .. }
        | E::MissingTensor { .. }
        | E::ShapeMismatch { .. }
        | E::UnsupportedConversion { .. }
        | E::Onnx { .. }
        | E::Npy { .. }
        | E::Limit(_)
        | E::UnsafePath(_)
        | E::Quantize { .. }
        | E::RuleFile { .. } => PyValueError::new_err(message),
        _ => PyRuntimeError::new_err(message),
    }
}

/// The text of a panic's payload.
fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

// ---------------------------------------------------------------------------------------------
// Logging: the library's tracing events, queued here and handed to Python `logging` by the
// thread that waits for the call (the worker never takes the GIL).

/// One log event: its level, logger name and message.
struct Record {
    level: Level,
    logger: String,
    message: String,
}

/// Events not yet handed to Python.
static RECORDS: Mutex<Vec<Record>> = Mutex::new(Vec::new());

/// The tracing layer that queues events: mobius' own from INFO up, others' (egg) from WARN.
struct Queue;

fn wanted(meta: &Metadata<'_>) -> bool {
    match meta.target().starts_with("mobius") {
        true => *meta.level() <= Level::INFO,
        false => *meta.level() <= Level::WARN,
    }
}

/// Collects an event's `message` and any other fields (`key=value`).
#[derive(Default)]
struct Text(String);

impl tracing::field::Visit for Text {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        let sep = if self.0.is_empty() { "" } else { " " };
        match field.name() {
            "message" => self.0 = format!("{value:?}{sep}{}", self.0),
            name => self.0 = format!("{}{sep}{name}={value:?}", self.0),
        }
    }
}

impl<S: Subscriber> Layer<S> for Queue {
    fn enabled(&self, meta: &Metadata<'_>, _: Context<'_, S>) -> bool {
        wanted(meta)
    }

    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        let meta = event.metadata();
        let mut text = Text::default();
        event.record(&mut text);
        let logger = match meta.target().strip_prefix("mobius") {
            Some(rest) => format!("mobius{}", rest.replace("::", ".")),
            None => format!("mobius.{}", meta.target().replace("::", ".")),
        };
        RECORDS
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Record {
                level: *meta.level(),
                logger,
                message: text.0,
            });
    }
}

/// Hands the queued events to Python `logging` (each on its `mobius.*` logger).
fn forward_logs(py: Python<'_>) -> PyResult<()> {
    let records = std::mem::take(&mut *RECORDS.lock().unwrap_or_else(PoisonError::into_inner));
    if records.is_empty() {
        return Ok(());
    }
    let logging = py.import("logging")?;
    for r in records {
        let level = match r.level {
            Level::ERROR => 40,
            Level::WARN => 30,
            Level::INFO => 20,
            Level::DEBUG => 10,
            Level::TRACE => 5,
        };
        let logger = logging.call_method1("getLogger", (r.logger,))?;
        logger.call_method1("log", (level, "%s", r.message))?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Running library calls off the GIL

/// Runs `work` on a worker thread. The calling thread waits without the GIL, forwarding log
/// events and checking for signals every [`POLL`]; a signal's exception (KeyboardInterrupt on
/// Ctrl-C) sets `cancel`, waits for the worker to stop, and is raised. A panic in `work`
/// becomes a `RuntimeError`.
fn run<T: Send>(
    py: Python<'_>,
    cancel: &Cancel,
    work: impl FnOnce() -> mobius::Result<T> + Send,
) -> PyResult<T> {
    let (tx, rx) = channel::<()>();
    let rx = Mutex::new(rx);
    std::thread::scope(|scope| {
        let worker = std::thread::Builder::new()
            .name("mobius".into())
            .spawn_scoped(scope, move || {
                let outcome = std::panic::catch_unwind(AssertUnwindSafe(work));
                let _ = tx.send(());
                outcome
            })
            .map_err(|e| PyRuntimeError::new_err(format!("cannot start a thread: {e}")))?;
        // The first exception raised while waiting (a signal's, or one from a logging
        // handler, KeyboardInterrupt included): it cancels the work and is raised once the
        // worker has stopped.
        let mut raised: Option<PyErr> = None;
        let mut stop = |e: PyErr| {
            if raised.is_none() {
                cancel.cancel();
                raised = Some(e);
            }
        };
        loop {
            let done = py.detach(|| {
                let rx = rx.lock().unwrap_or_else(PoisonError::into_inner);
                !matches!(rx.recv_timeout(POLL), Err(RecvTimeoutError::Timeout))
            });
            if let Err(e) = forward_logs(py) {
                stop(e);
            }
            if done {
                break;
            }
            if let Err(e) = py.check_signals() {
                stop(e);
            }
        }
        let outcome = worker.join().unwrap_or_else(Err);
        if let Err(e) = forward_logs(py) {
            stop(e);
        }
        if let Some(e) = raised {
            return Err(e);
        }
        match outcome {
            Ok(result) => result.map_err(py_error),
            Err(payload) => Err(PyRuntimeError::new_err(format!(
                "internal error in mobius (please report it): {}",
                panic_text(payload.as_ref())
            ))),
        }
    })
}

// ---------------------------------------------------------------------------------------------
// Execution providers (as JSON text; the Python side builds its dataclass from it)

/// The capabilities registered under `name` as JSON (`ep_json`'s fields), or `None`.
#[pyfunction]
fn ep_get(name: &str) -> PyResult<Option<String>> {
    match get_ep(name) {
        Ok(caps) => Ok(Some(ep_text(&caps))),
        Err(mobius::Error::UnknownEp { .. }) => Ok(None),
        Err(e) => Err(py_error(e)),
    }
}

/// One EP's JSON object.
fn ep_text(caps: &EpCapabilities) -> String {
    let list = ep_json(std::slice::from_ref(caps));
    let one = list
        .as_array()
        .and_then(|a| a.first())
        .cloned()
        .unwrap_or(list);
    one.to_string()
}

/// The registered EP names, in registration order.
#[pyfunction]
fn ep_names() -> Vec<String> {
    ep_registry()
}

/// Checks capabilities given as JSON (the dataclass's fields, dtypes by short name) the way
/// the registry checks them; raises `ValueError` naming the field.
#[pyfunction]
fn ep_check(fields: &str) -> PyResult<()> {
    caps_from_json(fields)?.validate().map_err(py_error)
}

/// Registers capabilities given as JSON; `overwrite` replaces a registered EP of that name.
#[pyfunction]
fn ep_register(fields: &str, overwrite: bool) -> PyResult<()> {
    register_ep(caps_from_json(fields)?, overwrite).map_err(py_error)
}

/// Registers the EP of a TOML file (`--ep-file`) and returns its name.
#[pyfunction]
fn ep_register_file(path: PathBuf) -> PyResult<String> {
    register_ep_file(&path).map(|c| c.name).map_err(py_error)
}

/// [`EpCapabilities`] from the dataclass's fields as JSON. Fields not given keep the spec
/// defaults, and the cost parameters start from the `default` EP's, as an EP file without
/// `base` does.
fn caps_from_json(text: &str) -> PyResult<EpCapabilities> {
    let bad = |m: String| PyValueError::new_err(m);
    let value: Value = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
    let Value::Object(fields) = value else {
        return Err(bad("EpCapabilities fields must be an object".into()));
    };
    let name = fields
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("EpCapabilities needs a `name` (a string)".into()))?;
    let mut caps = EpCapabilities {
        cost: get_ep("default").map_err(py_error)?.cost,
        ..EpCapabilities::new(name)
    };
    let field_error = |key: &str, want: &str| {
        bad(format!(
            "EpCapabilities(name={name:?}): field `{key}` must be {want}"
        ))
    };
    for (key, v) in &fields {
        let flag = || v.as_bool().ok_or_else(|| field_error(key, "a bool"));
        match key.as_str() {
            "name" => {}
            "dtypes" => {
                caps.dtypes = dtypes(v).ok_or_else(|| field_error(key, "a set of f32/f16/bf16"))?
            }
            "default_dtype" => {
                caps.default_dtype = v
                    .as_str()
                    .and_then(DType::parse_model_dtype)
                    .ok_or_else(|| field_error(key, "one of f32, f16, bf16"))?
            }
            "gqa_dtypes" => {
                caps.gqa_dtypes =
                    dtypes(v).ok_or_else(|| field_error(key, "a set of f32/f16/bf16"))?
            }
            "qkv_pack_dtypes" => {
                caps.qkv_pack_dtypes =
                    dtypes(v).ok_or_else(|| field_error(key, "a set of f32/f16/bf16"))?
            }
            "supports_fused_rope" => caps.supports_fused_rope = flag()?,
            "supports_skip_layer_norm" => caps.supports_skip_layer_norm = flag()?,
            "supports_fused_moe" => caps.supports_fused_moe = flag()?,
            "supports_rank4_rmsnorm" => caps.supports_rank4_rmsnorm = flag()?,
            "supports_attention" => caps.supports_attention = flag()?,
            "supports_matmul_nbits" => caps.supports_matmul_nbits = flag()?,
            "supports_rotary_embedding" => caps.supports_rotary_embedding = flag()?,
            "supports_tensor_scatter" => caps.supports_tensor_scatter = flag()?,
            "supports_range" => caps.supports_range = flag()?,
            "supports_contrib_ops" => caps.supports_contrib_ops = flag()?,
            "supports_fp8_kv_cache" => caps.supports_fp8_kv_cache = flag()?,
            "enable_graph_capture" => caps.enable_graph_capture = flag()?,
            "supports_past_present_share_buffer" => {
                caps.supports_past_present_share_buffer = flag()?
            }
            "cap_kv_buffer_max_length" => caps.cap_kv_buffer_max_length = flag()?,
            "default_int4_accuracy_level" => {
                caps.default_int4_accuracy_level = v
                    .as_u64()
                    .and_then(|n| u8::try_from(n).ok())
                    .ok_or_else(|| field_error(key, "an int from 0 to 4"))?
            }
            "provider_options" => {
                let Value::Object(options) = v else {
                    return Err(field_error(key, "a dict of str to str"));
                };
                caps.provider_options = options
                    .iter()
                    .map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                    .collect::<Option<BTreeMap<_, _>>>()
                    .ok_or_else(|| field_error(key, "a dict of str to str"))?;
            }
            "cost" => {
                let Value::Object(params) = v else {
                    return Err(field_error(key, "None or a dict of cost parameters"));
                };
                for (p, x) in params {
                    let number = x
                        .as_f64()
                        .ok_or_else(|| field_error(&format!("cost.{p}"), "a number"))?;
                    match p.as_str() {
                        "launch_overhead_us" => caps.cost.launch_overhead_us = number,
                        "memory_bandwidth_gbps" => caps.cost.memory_bandwidth_gbps = number,
                        "peak_tflops_f32" => caps.cost.peak_tflops_f32 = number,
                        "peak_tflops_f16" => caps.cost.peak_tflops_f16 = number,
                        "prefill_tokens" => {
                            caps.cost.prefill_tokens = x
                                .as_u64()
                                .and_then(|n| u32::try_from(n).ok())
                                .ok_or_else(|| field_error("cost.prefill_tokens", "an int"))?
                        }
                        other => {
                            return Err(bad(format!(
                                "EpCapabilities(name={name:?}): unknown cost parameter `{other}`; expected launch_overhead_us, memory_bandwidth_gbps, peak_tflops_f32, peak_tflops_f16, prefill_tokens"
                            )))
                        }
                    }
                }
            }
            "cost_ops" => {
                let Value::Object(ops) = v else {
                    return Err(field_error(key, "a dict of op to {overhead_us, scale}"));
                };
                for (op, c) in ops {
                    let mut correction = mobius::ep::OpCostCorrection {
                        overhead_us: 0.0,
                        scale: 1.0,
                    };
                    let Value::Object(c) = c else {
                        return Err(field_error(
                            &format!("cost_ops[{op:?}]"),
                            "a dict with overhead_us and scale",
                        ));
                    };
                    for (k, x) in c {
                        let number = x.as_f64().ok_or_else(|| {
                            field_error(&format!("cost_ops[{op:?}].{k}"), "a number")
                        })?;
                        match k.as_str() {
                            "overhead_us" => correction.overhead_us = number,
                            "scale" => correction.scale = number,
                            _ => {
                                return Err(field_error(
                                    &format!("cost_ops[{op:?}].{k}"),
                                    "one of overhead_us, scale",
                                ))
                            }
                        }
                    }
                    caps.cost_ops.insert(op.clone(), correction);
                }
            }
            other => {
                return Err(bad(format!(
                    "EpCapabilities(name={name:?}): unknown field `{other}`"
                )))
            }
        }
    }
    Ok(caps)
}

/// A dtype set from a JSON list of short names.
fn dtypes(v: &Value) -> Option<BTreeSet<DType>> {
    v.as_array()?
        .iter()
        .map(|n| DType::parse_model_dtype(n.as_str()?))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Building

/// A built model (`mobius.ModelPackage` wraps it).
#[pyclass(frozen, module = "mobius._mobius", name = "Package")]
struct Package {
    inner: Arc<ModelPackage>,
}

/// Where `model_id` points: a local folder when it names one (or looks like a path: starts
/// with `/`, `.` or `~`, or has more than one `/`), else a Hugging Face repo id.
fn source_for(model_id: &str, revision: Option<String>) -> ModelSource {
    let path = Path::new(model_id);
    let path_like = path.is_dir()
        || model_id.starts_with(['/', '.', '~'])
        || model_id.contains('\\')
        || model_id.matches('/').count() > 1;
    match path_like {
        true => ModelSource::LocalDir(expand_home(model_id)),
        false => ModelSource::Hub {
            id: model_id.to_string(),
            revision,
        },
    }
}

/// `~/x` with the home folder in front (as a shell would); other paths as they are.
fn expand_home(path: &str) -> PathBuf {
    match (path.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => PathBuf::from(home).join(rest),
        _ => PathBuf::from(path),
    }
}

/// The quantization request of `--quant BITS` and its companions.
fn quant_request(
    quant: Option<&str>,
    block_size: u32,
    asymmetric: bool,
    exclude: Vec<String>,
    embeddings: bool,
) -> PyResult<Option<QuantRequest>> {
    let bits = match quant {
        None => return Ok(None),
        Some("int4") => 4,
        Some("int8") => 8,
        Some(other) => {
            return Err(PyValueError::new_err(format!(
                "unknown quant `{other}`; expected int4 or int8"
            )))
        }
    };
    if ![16, 32, 64, 128, 256].contains(&block_size) {
        return Err(PyValueError::new_err(format!(
            "quant_block_size {block_size}: expected 16, 32, 64, 128 or 256"
        )));
    }
    Ok(Some(QuantRequest {
        params: QuantParams {
            bits,
            block_size: block_size as usize,
            symmetric: !asymmetric,
        },
        exclude,
        embeddings,
    }))
}

/// A model dtype by name (`None` stays `None`).
fn model_dtype(name: Option<&str>) -> PyResult<Option<DType>> {
    name.map(|n| {
        DType::parse_model_dtype(n).ok_or_else(|| {
            PyValueError::new_err(format!("unknown dtype `{n}`; expected f32, f16 or bf16"))
        })
    })
    .transpose()
}

/// Builds a model: `mobius build` with the same arguments, without writing anything.
#[pyfunction]
#[pyo3(signature = (model_id, *, revision=None, dtype=None, load_weights=true,
    execution_provider=None, ep_file=None, trace=false, quant=None, quant_block_size=32,
    quant_asymmetric=false, quant_exclude=Vec::new(), quant_embeddings=false,
    accuracy_level=None, features=Vec::new(), max_seq_len=None, kv_cache_scale_file=None,
    assume_llama=false, verify_rewrites=false))]
#[allow(clippy::too_many_arguments)]
fn build(
    py: Python<'_>,
    model_id: &str,
    revision: Option<String>,
    dtype: Option<&str>,
    load_weights: bool,
    execution_provider: Option<&str>,
    ep_file: Option<PathBuf>,
    trace: bool,
    quant: Option<&str>,
    quant_block_size: u32,
    quant_asymmetric: bool,
    quant_exclude: Vec<String>,
    quant_embeddings: bool,
    accuracy_level: Option<u8>,
    features: Vec<String>,
    max_seq_len: Option<u64>,
    kv_cache_scale_file: Option<PathBuf>,
    assume_llama: bool,
    verify_rewrites: bool,
) -> PyResult<Package> {
    if accuracy_level.is_some_and(|l| l > 4) {
        return Err(PyValueError::new_err(
            "accuracy_level must be 0, 1, 2, 3 or 4",
        ));
    }
    let names: Vec<&str> = features.iter().map(String::as_str).collect();
    let features =
        Features::parse(&names, max_seq_len, kv_cache_scale_file.as_deref()).map_err(py_error)?;
    let execution_provider = target_ep(execution_provider, ep_file.as_deref()).map_err(py_error)?;
    let opts = BuildOptions {
        source: source_for(model_id, revision),
        dtype: model_dtype(dtype)?,
        load_weights,
        hub: HubSettings::from_env(),
        execution_provider,
        limits: Limits::default(),
        verify_rewrites,
        quant: quant_request(
            quant,
            quant_block_size,
            quant_asymmetric,
            quant_exclude,
            quant_embeddings,
        )?,
        accuracy_level,
        assume_llama,
        prune_lm_head: features.prune_lm_head,
        static_cache: features.static_cache,
        fp8_kv_cache: features.fp8_kv_cache,
        trace,
        cancel: Some(Cancel::new()),
    };
    let cancel = opts.cancel.clone().unwrap_or_default();
    let package = run(py, &cancel, || {
        let package = mobius::build(&opts)?;
        release_freed_memory();
        if let Some(summary) = &package.quantization {
            tracing::info!("{summary}");
        }
        Ok(package)
    })?;
    Ok(Package {
        inner: Arc::new(package),
    })
}

#[pymethods]
impl Package {
    /// Writes the package into `out` as `mobius build` does (atomically: a failed or
    /// interrupted save leaves nothing there). Returns the bytes written.
    #[pyo3(signature = (out, *, overwrite=false, progress=false))]
    fn save(
        &self,
        py: Python<'_>,
        out: PathBuf,
        overwrite: bool,
        progress: bool,
    ) -> PyResult<Py<PyDict>> {
        let cancel = Cancel::new();
        let opts = SaveOptions {
            out,
            overwrite,
            progress,
            cancel: Some(cancel.clone()),
        };
        let package = &self.inner;
        let report = run(py, &cancel, || package.save(&opts))?;
        let d = PyDict::new(py);
        d.set_item("model_bytes", report.model_bytes)?;
        d.set_item("data_bytes", report.data_bytes)?;
        d.set_item("clamped_f16", report.clamped_f16)?;
        Ok(d.unbind())
    }

    /// The encoded `ModelProto` that `save` writes as model.onnx (nothing is written).
    fn model_bytes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let package = &self.inner;
        let bytes = run(py, &Cancel::new(), || package.model_bytes())?;
        Ok(PyBytes::new(py, &bytes))
    }

    /// The optimizer's report (`[EP Trace]` lines; per-group deltas only when traced).
    fn trace(&self) -> String {
        self.inner.optimization.to_string()
    }

    /// Facts about the package: EP, dtype, node and initializer counts, and the normalised
    /// architecture.
    fn info(&self, py: Python<'_>) -> PyResult<Py<PyDict>> {
        let p = &self.inner;
        let c = &p.config;
        let d = PyDict::new(py);
        d.set_item("execution_provider", &p.execution_provider.name)?;
        d.set_item("dtype", p.dtype.name())?;
        d.set_item("nodes", p.model.graph.nodes.len())?;
        d.set_item("initializers", p.model.graph.initializers.len())?;
        d.set_item("role", c.role().to_string())?;
        d.set_item("model_type", c.model_type.name)?;
        d.set_item("genai_model_type", c.model_type.genai_type)?;
        d.set_item("hidden_size", c.hidden_size)?;
        d.set_item("intermediate_size", c.intermediate_size)?;
        d.set_item("num_attention_heads", c.num_attention_heads)?;
        d.set_item("num_key_value_heads", c.num_key_value_heads)?;
        d.set_item("head_dim", c.head_dim)?;
        d.set_item("num_hidden_layers", c.num_hidden_layers)?;
        d.set_item("vocab_size", c.vocab_size)?;
        d.set_item("max_position_embeddings", c.max_position_embeddings)?;
        d.set_item("rms_norm_eps", c.rms_norm_eps)?;
        d.set_item("tie_word_embeddings", c.tie_word_embeddings)?;
        d.set_item("bos_token_id", c.bos_token_id)?;
        d.set_item("eos_token_id", c.eos_token_ids.clone())?;
        d.set_item("pad_token_id", c.pad_token_id)?;
        Ok(d.unbind())
    }

    /// Writes genai_config.json for EP `ep` into the existing folder `out` and copies the
    /// tokenizer files of `tokenizer_from` (a repo id or folder; `None`: none). Returns
    /// `{key: path}` of the files written.
    #[pyo3(signature = (out, ep, tokenizer_from=None))]
    fn write_genai_files(
        &self,
        py: Python<'_>,
        out: PathBuf,
        ep: &str,
        tokenizer_from: Option<&str>,
    ) -> PyResult<Vec<(String, PathBuf)>> {
        let caps = get_ep(ep).map_err(py_error)?;
        let source = tokenizer_from.map(|id| source_for(id, None));
        let hub = HubSettings::from_env();
        let package = &self.inner;
        run(py, &Cancel::new(), || {
            package.write_genai_files(&out, &caps, source.as_ref().map(|s| (s, &hub)))
        })
    }
}

// ---------------------------------------------------------------------------------------------
// optimize / verify / cost on .onnx files

/// `mobius optimize`: returns the report's figures and its `[EP Trace]` text.
#[pyfunction]
#[pyo3(signature = (input, out, *, execution_provider="default", dtype=None, role="decoder",
    overwrite=false, kv_cache="as-is", quant=None, quant_block_size=32, quant_asymmetric=false,
    quant_exclude=Vec::new(), quant_embeddings=false, accuracy_level=None, trace=false,
    verify_rewrites=false))]
#[allow(clippy::too_many_arguments)]
fn optimize(
    py: Python<'_>,
    input: PathBuf,
    out: PathBuf,
    execution_provider: &str,
    dtype: Option<&str>,
    role: &str,
    overwrite: bool,
    kv_cache: &str,
    quant: Option<&str>,
    quant_block_size: u32,
    quant_asymmetric: bool,
    quant_exclude: Vec<String>,
    quant_embeddings: bool,
    accuracy_level: Option<u8>,
    trace: bool,
    verify_rewrites: bool,
) -> PyResult<Py<PyDict>> {
    let opts = OptimizeFileOptions {
        input,
        out,
        ep: get_ep(execution_provider).map_err(py_error)?,
        dtype: model_dtype(dtype)?,
        role: role.parse().map_err(|e: String| PyValueError::new_err(e))?,
        overwrite,
        limits: Limits::default(),
        verify_rewrites,
        quant: quant_request(
            quant,
            quant_block_size,
            quant_asymmetric,
            quant_exclude,
            quant_embeddings,
        )?,
        accuracy_level,
        kv_cache: kv_cache
            .parse()
            .map_err(|e: String| PyValueError::new_err(e))?,
        trace,
    };
    let (report, quantization) = run(py, &Cancel::new(), || optimize_file(&opts))?;
    let d = PyDict::new(py);
    d.set_item("execution_provider", &report.ep)?;
    d.set_item("dtype", report.dtype.name())?;
    d.set_item("role", report.role.to_string())?;
    d.set_item("nodes_before", report.nodes_before)?;
    d.set_item("nodes_after", report.nodes_after)?;
    d.set_item("cost_before_us", report.cost_before)?;
    d.set_item("cost_after_us", report.cost_after)?;
    d.set_item("seconds", report.seconds)?;
    d.set_item("quantization", quantization.map(|q| q.to_string()))?;
    d.set_item("trace", report.to_string())?;
    Ok(d.unbind())
}

/// `mobius verify`: per output its largest differences and verdict.
#[pyfunction]
#[pyo3(signature = (reference, candidate, *, dims=BTreeMap::new(), samples=3, seed=0,
    random_mask=false, atol=None, rtol=None))]
#[allow(clippy::too_many_arguments)]
fn verify_models(
    py: Python<'_>,
    reference: PathBuf,
    candidate: PathBuf,
    dims: BTreeMap<String, usize>,
    samples: usize,
    seed: u64,
    random_mask: bool,
    atol: Option<f64>,
    rtol: Option<f64>,
) -> PyResult<Py<PyDict>> {
    for (what, t) in [("atol", atol), ("rtol", rtol)] {
        if let Some(t) = t {
            mobius::verify::check_tolerance(what, t).map_err(py_error)?;
        }
    }
    if samples == 0 {
        return Err(PyValueError::new_err("samples must be at least 1"));
    }
    let opts = VerifyOptions {
        reference,
        candidate,
        dims,
        samples,
        seed,
        random_mask,
        atol,
        rtol,
        limits: InterpLimits::default(),
    };
    let report = run(py, &Cancel::new(), || verify(&opts))?;
    let d = PyDict::new(py);
    d.set_item("passed", report.passed())?;
    d.set_item("dims", report.dims.clone())?;
    d.set_item("derived", report.derived.clone())?;
    let outputs = report
        .outputs
        .iter()
        .map(|o| {
            let e = PyDict::new(py);
            e.set_item("name", &o.name)?;
            e.set_item("max_abs", o.max_abs)?;
            e.set_item("max_rel", o.max_rel)?;
            e.set_item("nan_one_side", o.nan_one_side)?;
            e.set_item("atol", o.atol)?;
            e.set_item("rtol", o.rtol)?;
            e.set_item("within", o.within)?;
            Ok(e)
        })
        .collect::<PyResult<Vec<_>>>()?;
    d.set_item("outputs", outputs)?;
    d.set_item("report", report.to_string())?;
    Ok(d.unbind())
}

/// `mobius cost --json`: the same JSON text.
#[pyfunction]
#[pyo3(signature = (model, *, execution_provider="default", dims=BTreeMap::new()))]
fn cost(
    py: Python<'_>,
    model: PathBuf,
    execution_provider: &str,
    dims: BTreeMap<String, usize>,
) -> PyResult<String> {
    let opts = CostOptions {
        model,
        ep: get_ep(execution_provider).map_err(py_error)?,
        dims,
    };
    let report = run(py, &Cancel::new(), || cost_file(&opts))?;
    Ok(serde_json::to_string(&report.to_json()).expect("JSON values serialise"))
}

/// The module: the functions above, and the log queue installed as the process's tracing
/// subscriber (unless the embedding program set one).
#[pymodule]
fn _mobius(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let _ = tracing::subscriber::set_global_default(tracing_subscriber::registry().with(Queue));
    m.add_function(wrap_pyfunction!(ep_get, m)?)?;
    m.add_function(wrap_pyfunction!(ep_names, m)?)?;
    m.add_function(wrap_pyfunction!(ep_check, m)?)?;
    m.add_function(wrap_pyfunction!(ep_register, m)?)?;
    m.add_function(wrap_pyfunction!(ep_register_file, m)?)?;
    m.add_function(wrap_pyfunction!(build, m)?)?;
    m.add_function(wrap_pyfunction!(optimize, m)?)?;
    m.add_function(wrap_pyfunction!(verify_models, m)?)?;
    m.add_function(wrap_pyfunction!(cost, m)?)?;
    m.add_class::<Package>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
