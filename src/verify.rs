//! `mobius verify A.onnx B.onnx`: run both models through the reference interpreter on the same
//! random inputs and compare every output.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use crate::interp::{run_graph, Tensor};
use crate::ir::{DType, Dim, Graph, Model, ValueInfo};
use crate::onnx::import;
use crate::weights::eval::Evaluator;
use crate::{Error, Result};

/// What to compare and how.
#[derive(Debug, Clone)]
pub struct VerifyOptions {
    /// The reference model.
    pub reference: PathBuf,
    /// The model checked against it.
    pub candidate: PathBuf,
    /// Sizes of symbolic dims (`batch`, `sequence_len`, …); unnamed ones use [`default_dim`].
    pub dims: BTreeMap<String, usize>,
    /// How many random input sets.
    pub samples: usize,
    /// RNG seed.
    pub seed: u64,
    /// Random 0/1 attention masks (left padding) instead of all ones.
    pub random_mask: bool,
    /// Absolute tolerance (`None`: by output dtype).
    pub atol: Option<f64>,
    /// Relative tolerance, times the reference's largest magnitude (`None`: by output dtype).
    pub rtol: Option<f64>,
}

/// The comparison of one output over all samples.
#[derive(Debug, Clone, PartialEq)]
pub struct OutputDiff {
    /// Output name.
    pub name: String,
    /// Largest absolute difference.
    pub max_abs: f64,
    /// `max_abs` divided by the reference's largest magnitude.
    pub max_rel: f64,
    /// Tolerances applied.
    pub atol: f64,
    /// Relative tolerance applied.
    pub rtol: f64,
    /// Whether every sample was within `atol + rtol · max|reference|`.
    pub within: bool,
}

/// The verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct VerifyReport {
    /// Per output, in the reference's output order.
    pub outputs: Vec<OutputDiff>,
    /// The dims used.
    pub dims: BTreeMap<String, usize>,
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
        writeln!(
            f,
            "{:<32} {:>12} {:>12} {:>10} {:>10}  verdict",
            "output", "max abs", "max rel", "atol", "rtol"
        )?;
        for o in &self.outputs {
            writeln!(
                f,
                "{:<32} {:>12.3e} {:>12.3e} {:>10.1e} {:>10.1e}  {}",
                o.name,
                o.max_abs,
                o.max_rel,
                o.atol,
                o.rtol,
                if o.within { "ok" } else { "DIFFERENT" }
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

/// Size of a symbolic dim when the user does not give one.
pub fn default_dim(name: &str) -> usize {
    let n = name.to_ascii_lowercase();
    if n.contains("past") {
        3
    } else if n.contains("seq") {
        7
    } else {
        1
    }
}

/// Default `(atol, rtol)` for an output dtype.
pub fn default_tolerance(dtype: DType) -> (f64, f64) {
    match dtype {
        DType::F16 => (2e-2, 1e-2),
        DType::BF16 => (1e-1, 5e-2),
        DType::F32 | DType::F64 => (1e-4, 1e-5),
        _ => (0.0, 0.0),
    }
}

/// A small deterministic RNG (splitmix64).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// Seeded generator.
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform integer in `[0, n)`.
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }
}

/// The value of a (possibly composite, `a + b`) symbolic dim.
fn dim_value(d: &Dim, dims: &mut BTreeMap<String, usize>) -> usize {
    match d {
        Dim::Fixed(v) => (*v).max(0) as usize,
        Dim::Sym(s) if s.contains(" + ") => s
            .split(" + ")
            .map(|t| dim_value(&Dim::Sym(t.trim().to_string()), dims))
            .sum(),
        Dim::Sym(s) => {
            // The peer spells the mask width `past_seq_len + seq_len` and the cache dims
            // `past_sequence_len` / `sequence_len`: they are the same sizes.
            let name = match s.as_str() {
                "seq_len" => "sequence_len",
                "past_seq_len" => "past_sequence_len",
                other => other,
            };
            *dims
                .entry(name.to_string())
                .or_insert_with(|| default_dim(name))
        }
    }
}

/// The vocabulary size a token input indexes: the rows of the initializer it gathers from.
fn vocab_of(graph: &Graph, input: &str) -> Option<usize> {
    graph
        .nodes
        .iter()
        .filter(|n| n.op_type == "Gather" && n.inputs.get(1).map(String::as_str) == Some(input))
        .find_map(|n| {
            graph
                .initializers
                .iter()
                .find(|i| i.name == n.inputs[0])
                .and_then(|i| i.shape.first().copied())
        })
}

/// Random inputs for `graph`, consistent across inputs (mask ↔ positions ↔ cache lengths).
pub fn random_inputs(
    graph: &Graph,
    dims: &mut BTreeMap<String, usize>,
    rng: &mut Rng,
    random_mask: bool,
) -> Result<HashMap<String, Tensor>> {
    let mut out = HashMap::new();
    let shapes: Vec<(&ValueInfo, Vec<usize>)> = graph
        .inputs
        .iter()
        .map(|v| (v, v.shape.0.iter().map(|d| dim_value(d, dims)).collect()))
        .collect();
    let mask_shape = shapes
        .iter()
        .find(|(v, _)| v.name == "attention_mask")
        .map(|(_, s)| s.clone());
    let mask: Option<Vec<i64>> = mask_shape.as_ref().map(|s| {
        let (b, t) = (
            s.first().copied().unwrap_or(1),
            s.get(1).copied().unwrap_or(1),
        );
        (0..b)
            .flat_map(|_| {
                let pad = if random_mask {
                    rng.below(t as u64 / 2 + 1) as usize
                } else {
                    0
                };
                (0..t).map(move |j| (j >= pad) as i64)
            })
            .collect()
    });
    for (v, shape) in &shapes {
        let n: usize = shape.iter().product();
        let t = match v.dtype {
            _ if v.name == "attention_mask" => Tensor::int(
                v.dtype,
                shape.clone(),
                mask.clone().expect("mask shape known"),
            ),
            _ if v.name == "position_ids" => {
                let (b, s) = (
                    shape.first().copied().unwrap_or(1),
                    shape.get(1).copied().unwrap_or(1),
                );
                let m = mask.clone().unwrap_or_else(|| vec![1; b * s]);
                let t = m.len() / b.max(1);
                let values = (0..b)
                    .flat_map(|row| {
                        let mut acc = 0i64;
                        let cum: Vec<i64> = m[row * t..(row + 1) * t]
                            .iter()
                            .map(|&x| {
                                acc += x;
                                (acc - 1).max(0)
                            })
                            .collect();
                        cum[t.saturating_sub(s)..].to_vec()
                    })
                    .collect();
                Tensor::int(v.dtype, shape.clone(), values)
            }
            DType::I64 | DType::I32 | DType::I8 | DType::U8 => {
                let hi = vocab_of(graph, &v.name).unwrap_or(100) as u64;
                Tensor::int(
                    v.dtype,
                    shape.clone(),
                    (0..n).map(|_| rng.below(hi) as i64).collect(),
                )
            }
            DType::Bool => Tensor::bool(shape.clone(), (0..n).map(|_| rng.below(2) == 1).collect()),
            dtype => Tensor::float(
                dtype,
                shape.clone(),
                (0..n).map(|_| (rng.unit() * 2.0 - 1.0) as f32).collect(),
            ),
        };
        out.insert(v.name.clone(), t);
    }
    Ok(out)
}

fn run(model: &Model, inputs: &HashMap<String, Tensor>) -> Result<HashMap<String, Tensor>> {
    run_graph(&model.graph, inputs, &mut Evaluator::new(None))
}

/// Compares two models on random inputs.
pub fn verify(opts: &VerifyOptions) -> Result<VerifyReport> {
    let a = import::load(&opts.reference)?;
    let b = import::load(&opts.candidate)?;
    let names = |m: &Model| {
        m.graph
            .inputs
            .iter()
            .map(|v| (v.name.clone(), v.dtype))
            .collect::<BTreeMap<_, _>>()
    };
    if names(&a) != names(&b) {
        return Err(Error::Graph(format!(
            "{} and {} have different inputs: {:?} vs {:?}",
            opts.reference.display(),
            opts.candidate.display(),
            names(&a).keys().collect::<Vec<_>>(),
            names(&b).keys().collect::<Vec<_>>()
        )));
    }
    let mut dims = opts.dims.clone();
    let mut rng = Rng::new(opts.seed);
    let mut diffs: Vec<OutputDiff> = a
        .graph
        .outputs
        .iter()
        .map(|o| {
            let (atol, rtol) = default_tolerance(o.dtype);
            OutputDiff {
                name: o.name.clone(),
                max_abs: 0.0,
                max_rel: 0.0,
                atol: opts.atol.unwrap_or(atol),
                rtol: opts.rtol.unwrap_or(rtol),
                within: true,
            }
        })
        .collect();
    for _ in 0..opts.samples.max(1) {
        let inputs = random_inputs(&a.graph, &mut dims, &mut rng, opts.random_mask)?;
        let (ra, rb) = (run(&a, &inputs)?, run(&b, &inputs)?);
        for d in &mut diffs {
            let x = &ra[&d.name];
            let y = rb.get(&d.name).ok_or_else(|| {
                Error::Graph(format!(
                    "{} has no output `{}`",
                    opts.candidate.display(),
                    d.name
                ))
            })?;
            if x.shape != y.shape {
                return Err(Error::Graph(format!(
                    "output `{}`: shapes {:?} and {:?} differ",
                    d.name, x.shape, y.shape
                )));
            }
            let (xs, ys) = (x.as_f64(), y.as_f64());
            let scale = xs.iter().fold(0f64, |m, v| m.max(v.abs()));
            let max_abs = xs
                .iter()
                .zip(&ys)
                .map(|(p, q)| {
                    if p.is_nan() && q.is_nan() {
                        0.0
                    } else {
                        (p - q).abs()
                    }
                })
                .fold(0f64, |m, v| {
                    if v.is_nan() || m.is_nan() {
                        f64::NAN
                    } else {
                        m.max(v)
                    }
                });
            d.max_abs = d.max_abs.max(max_abs);
            d.max_rel = d.max_rel.max(max_abs / scale.max(f64::MIN_POSITIVE));
            d.within &= max_abs <= d.atol + d.rtol * scale;
        }
    }
    Ok(VerifyReport {
        outputs: diffs,
        dims,
    })
}
