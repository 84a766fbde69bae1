//! The `mobius` command line.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};
use mobius::ir::DType;
use mobius::source::{HubSettings, ModelSource};
use mobius::{build, BuildOptions};
use tracing_subscriber::EnvFilter;

/// Turn Hugging Face checkpoints into ONNX packages for ONNX Runtime and onnxruntime-genai.
#[derive(Parser)]
#[command(name = "mobius", version, about, long_about = None)]
struct Cli {
    /// More log output (-v debug, -vv trace). RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true, conflicts_with = "quiet")]
    verbose: u8,
    /// Only print errors.
    #[arg(short, long, global = true)]
    quiet: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Build an ONNX package (model.onnx, model.onnx.data, genai_config.json, tokenizer files)
    /// from a checkpoint.
    Build(BuildArgs),
}

#[derive(Args)]
#[command(group = clap::ArgGroup::new("from").required(true).args(["model", "config"]))]
struct BuildArgs {
    /// Hugging Face repo id (ORG/NAME). Looked up in the Hugging Face cache first
    /// (HF_HUB_CACHE, HF_HOME), downloaded from HF_ENDPOINT otherwise; HF_HUB_OFFLINE=1
    /// forbids downloads.
    #[arg(long, value_name = "ORG/NAME")]
    model: Option<String>,
    /// Hub revision (branch, tag or commit) for --model.
    #[arg(long, requires = "model")]
    revision: Option<String>,
    /// Local checkpoint folder: config.json plus model.safetensors or a sharded
    /// model.safetensors.index.json.
    #[arg(long, value_name = "DIR")]
    config: Option<PathBuf>,
    /// Output folder. It must not exist or be empty, unless --overwrite.
    out: PathBuf,
    /// Model dtype. Default: the checkpoint's dtype (f32 when config.json does not say).
    #[arg(long, value_enum)]
    dtype: Option<DTypeArg>,
    /// Write the graph with declared initializer shapes but no weight data (the data file is
    /// a sparse, zero-filled placeholder). Weights are not downloaded.
    #[arg(long)]
    no_weights: bool,
    /// Replace an existing, non-empty output folder.
    #[arg(long)]
    overwrite: bool,
}

#[derive(Clone, Copy, ValueEnum)]
enum DTypeArg {
    #[value(name = "f32", alias = "float32")]
    F32,
    #[value(name = "f16", alias = "float16")]
    F16,
    #[value(name = "bf16", alias = "bfloat16")]
    Bf16,
}

impl From<DTypeArg> for DType {
    fn from(d: DTypeArg) -> DType {
        match d {
            DTypeArg::F32 => DType::F32,
            DTypeArg::F16 => DType::F16,
            DTypeArg::Bf16 => DType::BF16,
        }
    }
}

fn init_logging(verbose: u8, quiet: bool) {
    let default = match (quiet, verbose) {
        (true, _) => "error",
        (false, 0) => "info",
        (false, 1) => "debug",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .without_time()
        .with_target(false)
        .init();
}

fn run_build(args: BuildArgs, quiet: bool) -> mobius::Result<()> {
    let source = match (args.model, args.config) {
        (Some(id), _) => ModelSource::Hub {
            id,
            revision: args.revision,
        },
        (None, Some(dir)) => ModelSource::LocalDir(dir),
        (None, None) => unreachable!("clap requires --model or --config"),
    };
    let opts = BuildOptions {
        source,
        out: args.out,
        dtype: args.dtype.map(Into::into),
        weights: !args.no_weights,
        overwrite: args.overwrite,
        hub: HubSettings::from_env(),
        progress: !quiet,
    };
    let report = build(&opts)?;
    tracing::info!(
        "wrote {} ({}, {} nodes, {} initializers, {:.1} MB of weights) in {:.2}s",
        opts.out.display(),
        report.dtype,
        report.nodes,
        report.initializers,
        report.data_bytes as f64 / 1e6,
        report.seconds
    );
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.verbose, cli.quiet);
    let result = match cli.command {
        Command::Build(args) => run_build(args, cli.quiet),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
