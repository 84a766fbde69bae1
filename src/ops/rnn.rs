//! ONNX's classic recurrent layers: `RNN`, `GRU` and `LSTM`, forward, reverse or
//! bidirectional, in either `layout`, with per-sequence lengths, initial states, peepholes
//! (LSTM), `linear_before_reset` (GRU), coupled input and forget gates (LSTM's
//! `input_forget`), a clip on every gate's pre-activation and any of the spec's activation
//! functions. Each step is evaluated as the spec writes it, in f32, over the batch one
//! sequence at a time; the outputs are rounded to the input's dtype. A step past a sequence's
//! length leaves zeros in `Y`, and that sequence's final state is its last valid step's (zeros
//! for a sequence of length 0, as onnxruntime writes them).

use super::infer::Infer;
use super::types::{SymDim, TensorType};
use super::value::AttrValue;
use super::{OpCall, OpDef, Tensor};
use crate::ir::Attr;
use crate::Result;

/// The recurrent layers.
pub const OPS: &[OpDef] = &[
    OpDef::onnx(
        "RNN",
        &[
            "activation_alpha",
            "activation_beta",
            "activations",
            "clip",
            "direction",
            "hidden_size",
            "layout",
        ],
    )
    .infer(|c| infer_recurrent(c, 2))
    .eval(|c| eval_recurrent(c, Cell::Rnn)),
    OpDef::onnx(
        "GRU",
        &[
            "activation_alpha",
            "activation_beta",
            "activations",
            "clip",
            "direction",
            "hidden_size",
            "layout",
            "linear_before_reset",
        ],
    )
    .infer(|c| infer_recurrent(c, 2))
    .eval(|c| {
        let linear_before_reset = c.int("linear_before_reset", 0) != 0;
        eval_recurrent(
            c,
            Cell::Gru {
                linear_before_reset,
            },
        )
    }),
    OpDef::onnx(
        "LSTM",
        &[
            "activation_alpha",
            "activation_beta",
            "activations",
            "clip",
            "direction",
            "hidden_size",
            "input_forget",
            "layout",
        ],
    )
    .infer(|c| infer_recurrent(c, 3))
    .eval(|c| {
        let input_forget = c.int("input_forget", 0) != 0;
        eval_recurrent(c, Cell::Lstm { input_forget })
    }),
];

/// `Y` `[seq, dirs, batch, hidden]` (`layout` 1: `[batch, seq, dirs, hidden]`), then each
/// final state (`states` of them with `Y`) `[dirs, batch, hidden]` (`[batch, dirs, hidden]`),
/// in the input's dtype; the dims a missing `hidden_size` leaves unknown.
fn infer_recurrent(call: &Infer<'_>, outputs: usize) -> Vec<TensorType> {
    let x = call.ty(0);
    let dirs = match call.attrs.get("direction") {
        Some(AttrValue::Str(s)) if s.as_str() == "bidirectional" => 2,
        _ => 1,
    };
    let hidden = call
        .int("hidden_size")
        .map_or(SymDim::Unknown, SymDim::Known);
    let batch_first = call.int("layout") == Some(1);
    let Some(s) = x.shape.as_ref().filter(|s| s.len() == 3) else {
        return vec![x.with_unknown_shape(); outputs];
    };
    let (seq, batch) = match batch_first {
        true => (s[1].clone(), s[0].clone()),
        false => (s[0].clone(), s[1].clone()),
    };
    let dirs = SymDim::Known(dirs);
    let (y, state) = match batch_first {
        true => (
            vec![batch.clone(), seq, dirs.clone(), hidden.clone()],
            vec![batch, dirs, hidden],
        ),
        false => (
            vec![seq, dirs.clone(), batch.clone(), hidden.clone()],
            vec![dirs, batch, hidden],
        ),
    };
    let mut out = vec![TensorType {
        dtype: x.dtype,
        shape: Some(y),
    }];
    out.extend((1..outputs).map(|_| TensorType {
        dtype: x.dtype,
        shape: Some(state.clone()),
    }));
    out
}

/// Which layer a node is, with its cell's switches.
#[derive(Debug, Clone, Copy)]
enum Cell {
    /// `Hₜ = f(Xₜ·Wᵀ + Hₜ₋₁·Rᵀ + Wb + Rb)`.
    Rnn,
    /// Update gate z, reset gate r, candidate h (W's row blocks in that order).
    Gru {
        /// The reset gate multiplies `Hₜ₋₁·Rₕᵀ + Rbₕ` instead of `Hₜ₋₁`.
        linear_before_reset: bool,
    },
    /// Input gate i, output gate o, forget gate f, cell candidate c (W's row blocks in that
    /// order; peepholes i, o, f).
    Lstm {
        /// `f = 1 − i`.
        input_forget: bool,
    },
}

impl Cell {
    /// The row blocks of W and R.
    fn gates(self) -> usize {
        match self {
            Cell::Rnn => 1,
            Cell::Gru { .. } => 3,
            Cell::Lstm { .. } => 4,
        }
    }

    /// The default activations of one direction.
    fn default_activations(self) -> &'static [&'static str] {
        match self {
            Cell::Rnn => &["Tanh"],
            Cell::Gru { .. } => &["Sigmoid", "Tanh"],
            Cell::Lstm { .. } => &["Sigmoid", "Tanh", "Tanh"],
        }
    }
}

/// One of the activation functions the recurrent layers take, with its parameters.
#[derive(Debug, Clone, Copy)]
enum Activation {
    Relu,
    Tanh,
    Sigmoid,
    Affine(f32, f32),
    LeakyRelu(f32),
    ThresholdedRelu(f32),
    ScaledTanh(f32, f32),
    HardSigmoid(f32, f32),
    Elu(f32),
    Softsign,
    Softplus,
}

impl Activation {
    /// The function `name` (case-insensitive), taking its α and β from the fronts of
    /// `alphas` and `betas` where it has them (the spec's defaults where those are used up).
    fn parse(name: &str, alphas: &mut &[f32], betas: &mut &[f32]) -> Option<Activation> {
        let take = |list: &mut &[f32], default: f32| match list.split_first() {
            Some((v, rest)) => {
                *list = rest;
                *v
            }
            None => default,
        };
        Some(match name.to_ascii_lowercase().as_str() {
            "relu" => Activation::Relu,
            "tanh" => Activation::Tanh,
            "sigmoid" => Activation::Sigmoid,
            "affine" => Activation::Affine(take(alphas, 1.0), take(betas, 0.0)),
            "leakyrelu" => Activation::LeakyRelu(take(alphas, 0.01)),
            "thresholdedrelu" => Activation::ThresholdedRelu(take(alphas, 1.0)),
            "scaledtanh" => Activation::ScaledTanh(take(alphas, 1.0), take(betas, 1.0)),
            "hardsigmoid" => Activation::HardSigmoid(take(alphas, 0.2), take(betas, 0.5)),
            "elu" => Activation::Elu(take(alphas, 1.0)),
            "softsign" => Activation::Softsign,
            "softplus" => Activation::Softplus,
            _ => return None,
        })
    }

    fn apply(self, x: f32) -> f32 {
        match self {
            Activation::Relu => x.max(0.0),
            Activation::Tanh => x.tanh(),
            Activation::Sigmoid => 1.0 / (1.0 + (-x).exp()),
            Activation::Affine(a, b) => a * x + b,
            Activation::LeakyRelu(a) => {
                if x >= 0.0 {
                    x
                } else {
                    a * x
                }
            }
            Activation::ThresholdedRelu(a) => {
                if x > a {
                    x
                } else {
                    0.0
                }
            }
            Activation::ScaledTanh(a, b) => a * (b * x).tanh(),
            Activation::HardSigmoid(a, b) => (a * x + b).clamp(0.0, 1.0),
            Activation::Elu(a) => {
                if x >= 0.0 {
                    x
                } else {
                    a * (x.exp() - 1.0)
                }
            }
            Activation::Softsign => x / (1.0 + x.abs()),
            Activation::Softplus => (1.0 + x.exp()).ln(),
        }
    }
}

/// A float-list attribute, empty when unset.
fn floats<'a>(call: &OpCall<'a>, name: &str) -> &'a [f32] {
    match call.attrs().get(name) {
        Some(Attr::Floats(v)) => v,
        _ => &[],
    }
}

/// The dims of the layer, read from its inputs.
#[derive(Debug, Clone, Copy)]
struct Dims {
    seq: usize,
    batch: usize,
    input: usize,
    hidden: usize,
    dirs: usize,
    batch_first: bool,
}

impl Dims {
    /// Flat index of `X[t, b, k]`.
    fn x(&self, t: usize, b: usize) -> usize {
        match self.batch_first {
            true => (b * self.seq + t) * self.input,
            false => (t * self.batch + b) * self.input,
        }
    }

    /// Flat index of `Y[t, d, b, 0]`.
    fn y(&self, t: usize, d: usize, b: usize) -> usize {
        match self.batch_first {
            true => ((b * self.seq + t) * self.dirs + d) * self.hidden,
            false => ((t * self.dirs + d) * self.batch + b) * self.hidden,
        }
    }

    /// Flat index of a state's `[d, b, 0]`.
    fn state(&self, d: usize, b: usize) -> usize {
        match self.batch_first {
            true => (b * self.dirs + d) * self.hidden,
            false => (d * self.batch + b) * self.hidden,
        }
    }

    fn y_shape(&self) -> Vec<usize> {
        match self.batch_first {
            true => vec![self.batch, self.seq, self.dirs, self.hidden],
            false => vec![self.seq, self.dirs, self.batch, self.hidden],
        }
    }

    fn state_shape(&self) -> Vec<usize> {
        match self.batch_first {
            true => vec![self.batch, self.dirs, self.hidden],
            false => vec![self.dirs, self.batch, self.hidden],
        }
    }
}

fn eval_recurrent(call: &OpCall<'_>, cell: Cell) -> Result<Vec<Tensor>> {
    let (x, w, r) = (call.input(0)?, call.input(1)?, call.input(2)?);
    let (bias, lens, init_h) = (call.optional(3), call.optional(4), call.optional(5));
    let (init_c, peep) = match cell {
        Cell::Lstm { .. } => (call.optional(6), call.optional(7)),
        _ => (None, None),
    };
    let dirs = match call.string("direction").unwrap_or("forward") {
        "forward" | "reverse" => 1,
        "bidirectional" => 2,
        other => {
            return Err(call.error(format!(
                "direction `{other}`: expected forward, reverse or bidirectional"
            )))
        }
    };
    let reverse = call.string("direction") == Some("reverse");
    let batch_first = match call.int("layout", 0) {
        0 => false,
        1 => true,
        other => return Err(call.error(format!("layout {other}: expected 0 or 1"))),
    };
    let [s0, s1, input] = x.shape[..] else {
        return Err(call.error(format!("X must be rank 3, got {:?}", x.shape)));
    };
    let (seq, batch) = if batch_first { (s1, s0) } else { (s0, s1) };
    let gates = cell.gates();
    let hidden = match (call.attrs().get("hidden_size"), &r.shape[..]) {
        (Some(Attr::Int(h)), _) if *h > 0 => *h as usize,
        (Some(Attr::Int(h)), _) => return Err(call.error(format!("hidden_size {h} must be ≥ 1"))),
        (_, [_, _, h]) => *h,
        _ => return Err(call.error(format!("R must be rank 3, got {:?}", r.shape))),
    };
    let d = Dims {
        seq,
        batch,
        input,
        hidden,
        dirs,
        batch_first,
    };
    let rows = gates * hidden;
    let expect = |t: &Tensor, what: &str, shape: Vec<usize>| -> Result<()> {
        match t.shape == shape {
            true => Ok(()),
            false => Err(call.error(format!(
                "{what} must be {shape:?} (direction, hidden_size {hidden}, X {:?}), got {:?}",
                x.shape, t.shape
            ))),
        }
    };
    expect(w, "W", vec![dirs, rows, input])?;
    expect(r, "R", vec![dirs, rows, hidden])?;
    if let Some(t) = bias {
        expect(t, "B", vec![dirs, 2 * rows])?;
    }
    for (t, what) in [(init_h, "initial_h"), (init_c, "initial_c")] {
        if let Some(t) = t {
            expect(t, what, d.state_shape())?;
        }
    }
    if let Some(t) = peep {
        expect(t, "P", vec![dirs, 3 * hidden])?;
    }
    let lens: Vec<usize> = match lens {
        None => vec![seq; batch],
        Some(t) => {
            expect(t, "sequence_lens", vec![batch])?;
            let mut out = Vec::with_capacity(batch);
            for &n in t.ints()? {
                if n < 0 || n as usize > seq {
                    return Err(call.error(format!(
                        "sequence_lens holds {n}: each length must be in 0..={seq}"
                    )));
                }
                out.push(n as usize);
            }
            out
        }
    };
    // The activations of each direction, in order; α and β consumed as they are named.
    let per_dir = cell.default_activations().len();
    let names: Vec<String> = match call.attrs().get("activations") {
        Some(Attr::Strings(v)) => v.clone(),
        _ => (0..dirs)
            .flat_map(|_| cell.default_activations().iter().map(|s| s.to_string()))
            .collect(),
    };
    if names.len() != per_dir * dirs {
        return Err(call.error(format!(
            "activations names {} functions: expected {} ({per_dir} per direction)",
            names.len(),
            per_dir * dirs
        )));
    }
    let (mut alphas, mut betas) = (
        floats(call, "activation_alpha"),
        floats(call, "activation_beta"),
    );
    let mut acts = Vec::with_capacity(names.len());
    for name in &names {
        acts.push(
            Activation::parse(name, &mut alphas, &mut betas).ok_or_else(|| {
                call.error(format!("activation `{name}` is not one ONNX defines"))
            })?,
        );
    }
    let clip = match call.attrs().get("clip") {
        Some(Attr::Float(c)) if *c > 0.0 => Some(*c),
        Some(Attr::Float(c)) => return Err(call.error(format!("clip {c} must be > 0"))),
        _ => None,
    };
    call.alloc(&d.y_shape())?;
    let (xv, wv, rv) = (x.floats()?, w.floats()?, r.floats()?);
    let bv = bias.map(Tensor::floats).transpose()?;
    let hv = init_h.map(Tensor::floats).transpose()?;
    let cv = init_c.map(Tensor::floats).transpose()?;
    let pv = peep.map(Tensor::floats).transpose()?;
    let mut y = vec![0.0f32; seq * dirs * batch * hidden];
    let mut y_h = vec![0.0f32; dirs * batch * hidden];
    let mut y_c = vec![0.0f32; dirs * batch * hidden];
    let (mut gx, mut gh) = (vec![0.0f32; rows], vec![0.0f32; rows]);
    let mut next = vec![0.0f32; hidden];
    for dir in 0..dirs {
        let wd = &wv[dir * rows * input..][..rows * input];
        let rd = &rv[dir * rows * hidden..][..rows * hidden];
        let (wb, rb) = match bv {
            Some(b) => (
                &b[dir * 2 * rows..][..rows],
                &b[(dir * 2 + 1) * rows..][..rows],
            ),
            None => (&[][..], &[][..]),
        };
        let act = &acts[dir * per_dir..][..per_dir];
        let backward = reverse || dir == 1;
        for b in 0..batch {
            let at = d.state(dir, b);
            let mut h = hv.map_or(vec![0.0; hidden], |v| v[at..at + hidden].to_vec());
            let mut c = cv.map_or(vec![0.0; hidden], |v| v[at..at + hidden].to_vec());
            let n = lens[b];
            for step in 0..n {
                let t = if backward { n - 1 - step } else { step };
                let xt = &xv[d.x(t, b)..][..input];
                for (j, (gxj, ghj)) in gx.iter_mut().zip(gh.iter_mut()).enumerate() {
                    let wrow = &wd[j * input..][..input];
                    *gxj = dot(wrow, xt) + wb.get(j).copied().unwrap_or(0.0);
                    let rrow = &rd[j * hidden..][..hidden];
                    *ghj = dot(rrow, &h) + rb.get(j).copied().unwrap_or(0.0);
                }
                let clip = |v: f32| clip.map_or(v, |c| v.clamp(-c, c));
                match cell {
                    Cell::Rnn => {
                        for j in 0..hidden {
                            next[j] = act[0].apply(clip(gx[j] + gh[j]));
                        }
                    }
                    Cell::Gru {
                        linear_before_reset,
                    } => {
                        let (f, g) = (act[0], act[1]);
                        let reset: Vec<f32> = (0..hidden)
                            .map(|j| f.apply(clip(gx[hidden + j] + gh[hidden + j])))
                            .collect();
                        let rh: Vec<f32> = h.iter().zip(&reset).map(|(h, r)| h * r).collect();
                        for j in 0..hidden {
                            let z = f.apply(clip(gx[j] + gh[j]));
                            let k = 2 * hidden + j;
                            let recurrent = match linear_before_reset {
                                true => reset[j] * gh[k],
                                false => {
                                    let rrow = &rd[k * hidden..][..hidden];
                                    dot(rrow, &rh) + rb.get(k).copied().unwrap_or(0.0)
                                }
                            };
                            let cand = g.apply(clip(gx[k] + recurrent));
                            next[j] = (1.0 - z) * cand + z * h[j];
                        }
                    }
                    Cell::Lstm { input_forget } => {
                        let (f, g, hf) = (act[0], act[1], act[2]);
                        let p = |k: usize, j: usize| {
                            pv.map_or(0.0, |p| p[dir * 3 * hidden + k * hidden + j])
                        };
                        for j in 0..hidden {
                            let gate = |k: usize| gx[k * hidden + j] + gh[k * hidden + j];
                            let i = f.apply(clip(gate(0) + p(0, j) * c[j]));
                            let fg = match input_forget {
                                true => 1.0 - i,
                                false => f.apply(clip(gate(2) + p(2, j) * c[j])),
                            };
                            let cand = g.apply(clip(gate(3)));
                            let cell = fg * c[j] + i * cand;
                            let o = f.apply(clip(gate(1) + p(1, j) * cell));
                            c[j] = cell;
                            next[j] = o * hf.apply(cell);
                        }
                    }
                }
                h.copy_from_slice(&next);
                y[d.y(t, dir, b)..][..hidden].copy_from_slice(&h);
            }
            // A sequence of length 0 has no last step: its final states are zeros, as
            // onnxruntime writes them (the spec is silent).
            if n > 0 {
                y_h[at..at + hidden].copy_from_slice(&h);
                y_c[at..at + hidden].copy_from_slice(&c);
            }
        }
    }
    let mut out = vec![
        Tensor::float(x.dtype, d.y_shape(), y),
        Tensor::float(x.dtype, d.state_shape(), y_h),
    ];
    if let Cell::Lstm { .. } = cell {
        out.push(Tensor::float(x.dtype, d.state_shape(), y_c));
    }
    Ok(out)
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(a, b)| a * b).sum()
}

#[cfg(test)]
mod tests {
    use crate::interp::eval_op;
    use crate::ir::{Attr, Attrs, DType};
    use crate::limits::InterpLimits;
    use crate::ops::Tensor;

    /// A one-direction layer of `op` (`gates` row blocks, hidden 2, input 2) over 3 steps of
    /// batch 1, every weight 0.5.
    fn run(
        op: &str,
        gates: usize,
        x: Vec<f32>,
        attrs: Vec<(&str, Attr)>,
    ) -> crate::Result<Vec<Tensor>> {
        let x = Tensor::float(DType::F32, vec![3, 1, 2], x);
        let w = Tensor::float(DType::F32, vec![1, gates * 2, 2], vec![0.5; gates * 4]);
        let attrs: Attrs = attrs.into_iter().map(|(n, v)| (n.to_string(), v)).collect();
        let outs: &[&str] = if op == "LSTM" {
            &["y", "h", "c"]
        } else {
            &["y", "h"]
        };
        eval_op(
            "t",
            ("", op),
            attrs,
            &[Some(&x), Some(&w), Some(&w)],
            outs,
            &InterpLimits::default(),
        )
    }

    #[test]
    fn a_nan_input_makes_every_later_state_nan_as_the_spec_computes() {
        for (op, gates) in [("RNN", 1), ("GRU", 3), ("LSTM", 4)] {
            let out = run(op, gates, vec![0.1, 0.2, f32::NAN, 0.0, 0.3, 0.4], vec![]).unwrap();
            let y = out[0].floats().unwrap();
            assert!(y[..2].iter().all(|v| v.is_finite()), "{op}: {y:?}");
            assert!(y[2..].iter().all(|v| v.is_nan()), "{op}: {y:?}");
            assert!(out[1].floats().unwrap().iter().all(|v| v.is_nan()), "{op}");
        }
    }

    #[test]
    fn refuses_bad_attributes_by_name() {
        let x = vec![0.0; 6];
        let cases = [
            (
                "direction",
                Attr::String("sideways".into()),
                "direction `sideways`",
            ),
            ("layout", Attr::Int(2), "layout 2"),
            ("hidden_size", Attr::Int(3), "W must be"),
            ("hidden_size", Attr::Int(0), "hidden_size 0"),
            ("clip", Attr::Float(-1.0), "clip -1"),
            (
                "activations",
                Attr::Strings(vec!["Gelu".into()]),
                "activation `Gelu`",
            ),
            ("activations", Attr::Strings(vec![]), "activations names 0"),
        ];
        for (name, value, want) in cases {
            let err = run("RNN", 1, x.clone(), vec![(name, value)])
                .unwrap_err()
                .to_string();
            assert!(err.contains(want), "{name}: {err}");
        }
    }
}
