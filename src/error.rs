//! The error type of the mobius library.

use std::path::PathBuf;

/// Everything that can go wrong while resolving, building, optimizing or saving a model.
///
/// Each variant names the file or field at fault and what was expected, so the CLI can print
/// one clear line.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading or writing a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or folder involved.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A JSON file (config.json, an index, …) is not valid JSON or lacks a field.
    #[error("{}:{line}:{column}: {message}", path.display())]
    Json {
        /// The file.
        path: PathBuf,
        /// 1-based line of the problem (0 when unknown).
        line: usize,
        /// 1-based column of the problem (0 when unknown).
        column: usize,
        /// What is wrong.
        message: String,
    },
    /// A config.json field holds a value mobius cannot use.
    #[error("{}: field `{field}`: {message}", path.display())]
    ConfigField {
        /// The config file.
        path: PathBuf,
        /// The offending field.
        field: String,
        /// What was expected.
        message: String,
    },
    /// The checkpoint's `model_type` has no builder.
    #[error("{}: unsupported model_type `{found}`; supported: {}", path.display(), supported.join(", "))]
    UnsupportedModelType {
        /// The config file.
        path: PathBuf,
        /// The model_type found.
        found: String,
        /// The model types mobius can build.
        supported: Vec<String>,
    },
    /// A safetensors file is malformed.
    #[error("{}: invalid safetensors file: {message}", path.display())]
    Safetensors {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The model needs a tensor the checkpoint does not have.
    #[error("tensor `{name}` not found in the checkpoint ({searched})")]
    MissingTensor {
        /// The tensor name.
        name: String,
        /// Where it was looked for.
        searched: String,
    },
    /// A checkpoint tensor has a different shape than the model declares.
    #[error("tensor `{name}` in {}: expected shape {expected:?}, found {actual:?}", path.display())]
    ShapeMismatch {
        /// The tensor name.
        name: String,
        /// The file holding it.
        path: PathBuf,
        /// The shape the graph declares.
        expected: Vec<usize>,
        /// The shape in the checkpoint.
        actual: Vec<usize>,
    },
    /// A checkpoint tensor has a dtype mobius cannot convert.
    #[error("tensor `{name}`: cannot convert {from} to {to}")]
    UnsupportedConversion {
        /// The tensor name.
        name: String,
        /// Its dtype in the checkpoint.
        from: String,
        /// The requested dtype.
        to: String,
    },
    /// The model source (local folder, cache, hub) could not provide a file.
    #[error("{0}")]
    Source(String),
    /// The output location cannot be used.
    #[error("{}: {message}", path.display())]
    Output {
        /// The output folder.
        path: PathBuf,
        /// Why it cannot be used.
        message: String,
    },
    /// An ONNX file could not be decoded or uses something mobius does not handle.
    #[error("{}: {message}", path.display())]
    Onnx {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A `.npy` array file cannot be read, or does not fit the model input it is given for.
    #[error("{}: {message}", path.display())]
    Npy {
        /// The `.npy` file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// An execution provider name is not registered.
    #[error("unknown execution provider `{name}`; registered: {}", registered.join(", "))]
    UnknownEp {
        /// The name asked for.
        name: String,
        /// The registered names.
        registered: Vec<String>,
    },
    /// Execution provider capabilities break a rule (or duplicate a registered name).
    #[error("execution provider `{name}`: {message}")]
    InvalidEp {
        /// The EP name.
        name: String,
        /// What is wrong.
        message: String,
    },
    /// An EP file (TOML) is malformed.
    #[error("{}:{line}:{column}: {message}", path.display())]
    EpFile {
        /// The file.
        path: PathBuf,
        /// 1-based line (0 when unknown).
        line: usize,
        /// 1-based column (0 when unknown).
        column: usize,
        /// What is wrong.
        message: String,
    },
    /// The target EP cannot run some op of the graph and no rule rewrites it.
    #[error("execution provider `{ep}` cannot run {} and no enabled rule rewrites it into ops it runs", ops.join(", "))]
    EpCannotRun {
        /// The EP.
        ep: String,
        /// The ops (as e-graph text: `Attention/3`, `com.microsoft::…`).
        ops: Vec<String>,
    },
    /// Verification mode: a rewrite changed what a value computes.
    #[error("unsound rewrite `{rule}`: it replaced a value {before} with {after}")]
    UnsoundRewrite {
        /// The rule.
        rule: String,
        /// The value before (summarised).
        before: String,
        /// The value after (summarised).
        after: String,
    },
    /// A rewrite rule file is malformed.
    #[error("{}:{line}: {message}", path.display())]
    RuleFile {
        /// The rule file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// The graph is inconsistent (a bug, or an invalid imported model).
    #[error("invalid graph: {0}")]
    Graph(String),
    /// A bound on work ([`crate::limits`]) was exceeded; the message names the value, the limit
    /// and how to raise it.
    #[error("limit exceeded: {0}")]
    Limit(String),
    /// A path read from a file would leave the folder it must stay in ([`crate::paths`]).
    #[error("unsafe path: {0}")]
    UnsafePath(String),
    /// A weight cannot be quantized: a value is not finite, or its dtype or size does not fit.
    #[error(
        "cannot quantize {}: {message}",
        tensor.as_deref().map_or_else(|| "a weight".to_string(), |t| format!("tensor `{t}`"))
    )]
    Quantize {
        /// The weight's name; [`crate::quant::quantize`] does not know it and leaves it `None`
        /// for the caller to fill in.
        tensor: Option<String>,
        /// What is wrong (naming the element at fault).
        message: String,
    },
    /// The command line asks for something that cannot be done (exit code 2).
    #[error("{0}")]
    Usage(String),
    /// A [`crate::cancel::Cancel`] flag stopped the work; nothing was written.
    #[error("interrupted")]
    Interrupted,
}

/// The result type of the mobius library.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Wraps an I/O error with the path it concerns.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    /// Wraps a serde_json error with the file it came from (line and column included).
    pub fn json(path: impl Into<PathBuf>, err: &serde_json::Error) -> Self {
        let msg = err.to_string();
        // serde_json appends " at line L column C"; keep only the message part.
        let message = match msg.rfind(" at line ") {
            Some(i) => msg[..i].to_string(),
            None => msg,
        };
        Error::Json {
            path: path.into(),
            line: err.line(),
            column: err.column(),
            message,
        }
    }
}
