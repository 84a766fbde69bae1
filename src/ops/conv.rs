//! Sliding-window ops over the spatial axes of `[N, C, D1, …, Dk]` tensors: `Conv` and
//! `ConvTranspose` (groups,
//! strides, dilations, pads, `auto_pad`), `MaxPool`, `AveragePool`, `LpPool` (`ceil_mode`,
//! `count_include_pad`) and the global pools. One [`Windows`] computes the output extent and
//! the input positions each output element reads, for every op. Sums accumulate in f64.
//!
//! [`OPS`] registers each op with its attribute schema, type inference and cost facts
//! beside its evaluator.

use super::{OpCall, OpDef, Tensor};
use crate::Result;

/// The ops of this family.
pub const OPS: &[OpDef] = &[
    OpDef::onnx("Conv", CONV_ATTRS)
        .infer(|c| vec![c.ty(0).with_unknown_shape()])
        .eval(conv),
    OpDef::onnx("ConvTranspose", CONV_TRANSPOSE_ATTRS)
        .infer(|c| vec![c.ty(0).with_unknown_shape()])
        .eval(conv_transpose),
    OpDef::onnx("MaxPool", POOL_ATTRS)
        .infer(|c| vec![c.ty(0).with_unknown_shape()])
        .eval(|c| pool(c, Pool::Max)),
    OpDef::onnx("AveragePool", POOL_ATTRS)
        .infer(|c| vec![c.ty(0).with_unknown_shape()])
        .eval(|c| pool(c, Pool::Average)),
    OpDef::onnx("LpPool", POOL_ATTRS)
        .infer(|c| vec![c.ty(0).with_unknown_shape()])
        .eval(|c| pool(c, Pool::Lp)),
    OpDef::onnx("GlobalMaxPool", &[])
        .infer(|c| vec![c.ty(0).with_unknown_shape()])
        .eval(|c| global_pool(c, Pool::Max)),
    OpDef::onnx("GlobalAveragePool", &[])
        .infer(|c| vec![c.ty(0).with_unknown_shape()])
        .eval(|c| global_pool(c, Pool::Average)),
];

/// `Conv`'s attributes.
pub(super) const CONV_ATTRS: &[&str] = &[
    "auto_pad",
    "dilations",
    "group",
    "kernel_shape",
    "pads",
    "strides",
];

/// `ConvTranspose`'s attributes.
const CONV_TRANSPOSE_ATTRS: &[&str] = &[
    "auto_pad",
    "dilations",
    "group",
    "kernel_shape",
    "output_padding",
    "output_shape",
    "pads",
    "strides",
];

/// The pools' attributes.
const POOL_ATTRS: &[&str] = &[
    "auto_pad",
    "ceil_mode",
    "count_include_pad",
    "dilations",
    "kernel_shape",
    "p",
    "pads",
    "storage_order",
    "strides",
];

/// The pooling reductions.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pool {
    Max,
    Average,
    Lp,
}

/// Where the windows of a sliding-window op lie along each spatial axis.
struct Windows {
    /// Input extents.
    input: Vec<usize>,
    /// Kernel extents.
    kernel: Vec<usize>,
    /// Steps between windows.
    strides: Vec<usize>,
    /// Steps between a window's taps.
    dilations: Vec<usize>,
    /// Padding before each axis.
    begin: Vec<usize>,
    /// Padding after each axis.
    end: Vec<usize>,
    /// Output extents.
    output: Vec<usize>,
}

impl Windows {
    /// The windows of a node over spatial extents `input` with kernel `kernel`, from its
    /// `strides`, `dilations`, `pads` / `auto_pad` and (`ceil`) `ceil_mode`.
    fn new(call: &OpCall<'_>, input: &[usize], kernel: &[usize], ceil: bool) -> Result<Windows> {
        let k = input.len();
        let list = |name: &str| -> Result<Vec<usize>> {
            match call.ints(name) {
                None => Ok(vec![1; k]),
                Some(v) if v.len() == k && v.iter().all(|&x| x >= 1) => {
                    Ok(v.iter().map(|&x| x as usize).collect())
                }
                Some(v) => {
                    Err(call.error(format!("{name} must hold {k} positive values, got {v:?}")))
                }
            }
        };
        let (strides, dilations) = (list("strides")?, list("dilations")?);
        let reach: Vec<usize> = (0..k)
            .map(|a| dilations[a] * (kernel[a].max(1) - 1) + 1)
            .collect();
        let (mut begin, mut end) = (vec![0; k], vec![0; k]);
        match call.string("auto_pad").unwrap_or("NOTSET") {
            "NOTSET" => {
                if let Some(p) = call.ints("pads") {
                    if p.len() != 2 * k || p.iter().any(|&x| x < 0) {
                        return Err(call.error(format!(
                            "pads must hold {} non-negative values, got {p:?}",
                            2 * k
                        )));
                    }
                    for a in 0..k {
                        (begin[a], end[a]) = (p[a] as usize, p[a + k] as usize);
                    }
                }
            }
            "VALID" => {}
            mode @ ("SAME_UPPER" | "SAME_LOWER") => {
                for a in 0..k {
                    let out = input[a].div_ceil(strides[a]);
                    let total = ((out.max(1) - 1) * strides[a] + reach[a]).saturating_sub(input[a]);
                    let small = total / 2;
                    (begin[a], end[a]) = match mode {
                        "SAME_UPPER" => (small, total - small),
                        _ => (total - small, small),
                    };
                }
            }
            other => {
                return Err(call.error(format!(
                    "auto_pad must be NOTSET, VALID, SAME_UPPER or SAME_LOWER, got `{other}`"
                )))
            }
        }
        let mut output = Vec::with_capacity(k);
        for a in 0..k {
            let padded = input[a] + begin[a] + end[a];
            if padded < reach[a] {
                return Err(call.error(format!(
                    "spatial axis {a}: the window ({} with dilation) is longer than the padded \
                     input ({padded})",
                    reach[a]
                )));
            }
            let span = padded - reach[a];
            let mut out = match ceil {
                true => span.div_ceil(strides[a]) + 1,
                false => span / strides[a] + 1,
            };
            // A last window that would start in the end padding is dropped.
            if ceil && (out - 1) * strides[a] >= input[a] + begin[a] {
                out -= 1;
            }
            output.push(out);
        }
        Ok(Windows {
            input: input.to_vec(),
            kernel: kernel.to_vec(),
            strides,
            dilations,
            begin,
            end,
            output,
        })
    }

    /// For output position `out` (spatial coordinates), each kernel tap's flat spatial input
    /// position, `None` where the tap falls in the padding (or beyond it, with `ceil_mode`).
    fn taps(&self, out: &[usize]) -> Vec<Option<usize>> {
        let k = self.input.len();
        let count: usize = self.kernel.iter().product();
        let mut taps = Vec::with_capacity(count);
        let mut tap = vec![0usize; k];
        for _ in 0..count {
            let mut flat = Some(0usize);
            for a in 0..k {
                let i = (out[a] * self.strides[a] + tap[a] * self.dilations[a]) as i64
                    - self.begin[a] as i64;
                flat = match flat {
                    Some(f) if (0..self.input[a] as i64).contains(&i) => {
                        Some(f * self.input[a] + i as usize)
                    }
                    _ => None,
                };
            }
            taps.push(flat);
            for a in (0..k).rev() {
                tap[a] += 1;
                if tap[a] < self.kernel[a] {
                    break;
                }
                tap[a] = 0;
            }
        }
        taps
    }

    /// How many taps of the window at `out` lie inside the input plus its explicit padding
    /// (what `count_include_pad` divides by).
    fn padded_taps(&self, out: &[usize]) -> usize {
        (0..self.input.len())
            .map(|a| {
                let limit = (self.input[a] + self.begin[a] + self.end[a]) as i64;
                (0..self.kernel[a])
                    .filter(|&t| {
                        ((out[a] * self.strides[a] + t * self.dilations[a]) as i64) < limit
                    })
                    .count()
            })
            .product()
    }

    /// Every output position, row-major.
    fn positions(&self) -> Vec<Vec<usize>> {
        let n: usize = self.output.iter().product();
        let mut all = Vec::with_capacity(n);
        let mut p = vec![0usize; self.output.len()];
        for _ in 0..n {
            all.push(p.clone());
            for a in (0..p.len()).rev() {
                p[a] += 1;
                if p[a] < self.output[a] {
                    break;
                }
                p[a] = 0;
            }
        }
        all
    }
}

/// The input's `[N, C]` and spatial extents (rank 3 or more).
fn split_input(call: &OpCall<'_>, x: &Tensor) -> Result<(usize, usize, Vec<usize>)> {
    if x.shape.len() < 3 {
        return Err(call.error(format!(
            "input must be [N, C, D1, ...] (rank 3 or more), got {:?}",
            x.shape
        )));
    }
    Ok((x.shape[0], x.shape[1], x.shape[2..].to_vec()))
}

/// `Conv(X, W, B?)`: `Y[n, m, o…] = B[m] + Σ_{c, t} X[n, g·C/G + c, o·s + t·d − pad] ·
/// W[m, c, t]` for output channel `m` of group `g` (`group` G splits the channels).
fn conv(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let (x, w) = (call.input(0)?, call.input(1)?);
    let bias = call.optional(2).map(Tensor::as_f64);
    let (shape, out) = conv_sums(call, x, w, bias)?;
    let out = out.into_iter().map(|v| v as f32).collect();
    Ok(vec![Tensor::float(x.dtype, shape, out)])
}

/// The output shape and the f64 sums of a convolution of `x` by `w` (any element types: the
/// integer ops pass their values less their zero points) plus `bias`, under the node's `group`,
/// `kernel_shape`, strides, dilations and padding attributes.
pub(super) fn conv_sums(
    call: &OpCall<'_>,
    x: &Tensor,
    w: &Tensor,
    bias: Option<Vec<f64>>,
) -> Result<(Vec<usize>, Vec<f64>)> {
    let (n, c, spatial) = split_input(call, x)?;
    let groups = usize::try_from(call.int("group", 1))
        .ok()
        .filter(|&g| g >= 1)
        .ok_or_else(|| call.error("group must be positive"))?;
    if w.shape.len() != x.shape.len() || w.shape[0] % groups != 0 || w.shape[1] * groups != c {
        return Err(call.error(format!(
            "weight {:?} does not fit input {:?} with {groups} groups",
            w.shape, x.shape
        )));
    }
    let (m, cg) = (w.shape[0], w.shape[1]);
    let kernel = w.shape[2..].to_vec();
    if let Some(ks) = call.ints("kernel_shape") {
        if ks.iter().map(|&k| k as usize).ne(kernel.iter().copied()) {
            return Err(call.error(format!(
                "kernel_shape {ks:?} is not the weight's {kernel:?}"
            )));
        }
    }
    let bias = match bias {
        Some(b) if b.len() != m => {
            return Err(call.error(format!("bias must hold {m} values, got {}", b.len())))
        }
        Some(b) => b,
        None => vec![0.0; m],
    };
    let win = Windows::new(call, &spatial, &kernel, false)?;
    let shape = [&[n, m][..], &win.output].concat();
    call.alloc(&shape)?;
    let (xv, wv) = (x.as_f64(), w.as_f64());
    let (area, taps_n): (usize, usize) = (spatial.iter().product(), kernel.iter().product());
    let positions = win.positions();
    let taps: Vec<Vec<Option<usize>>> = positions.iter().map(|p| win.taps(p)).collect();
    let mut out = Vec::with_capacity(shape.iter().product());
    for b in 0..n {
        for (oc, &bias) in bias.iter().enumerate() {
            let g = oc / (m / groups);
            for taps in &taps {
                let mut acc = bias;
                for ic in 0..cg {
                    let xbase = (b * c + g * cg + ic) * area;
                    let wbase = (oc * cg + ic) * taps_n;
                    for (t, tap) in taps.iter().enumerate() {
                        if let Some(i) = tap {
                            acc += xv[xbase + i] * wv[wbase + t];
                        }
                    }
                }
                out.push(acc);
            }
        }
    }
    Ok((shape, out))
}

/// `MaxPool` (with its optional `Indices` output: flat positions in the input, row-major, or
/// column-major over the spatial axes with `storage_order` 1), `AveragePool` (the padding
/// counted in the divisor with `count_include_pad`) and `LpPool` (`(Σ|x|ᵖ)^(1/p)`).
fn pool(call: &OpCall<'_>, kind: Pool) -> Result<Vec<Tensor>> {
    let x = call.input(0)?;
    let (n, c, spatial) = split_input(call, x)?;
    let kernel: Vec<usize> = match call.ints("kernel_shape") {
        Some(k) if k.len() == spatial.len() && k.iter().all(|&v| v >= 1) => {
            k.iter().map(|&v| v as usize).collect()
        }
        other => {
            return Err(call.error(format!(
                "kernel_shape must hold {} positive values, got {other:?}",
                spatial.len()
            )))
        }
    };
    let win = Windows::new(call, &spatial, &kernel, call.int("ceil_mode", 0) != 0)?;
    let shape = [&[n, c][..], &win.output].concat();
    call.alloc(&shape)?;
    let xv = x.as_f64();
    let area: usize = spatial.iter().product();
    let include_pad = call.int("count_include_pad", 0) != 0;
    let p = call.int("p", 2) as f64;
    let positions = win.positions();
    let windows: Vec<(Vec<Option<usize>>, usize)> = positions
        .iter()
        .map(|pos| (win.taps(pos), win.padded_taps(pos)))
        .collect();
    let column_major = call.int("storage_order", 0) != 0;
    let mut out = Vec::with_capacity(shape.iter().product());
    let mut indices = Vec::new();
    for plane in 0..n * c {
        let base = plane * area;
        for (taps, padded) in &windows {
            let inside = taps.iter().flatten().map(|&i| (i, xv[base + i]));
            let value = match kind {
                Pool::Max => {
                    // As onnxruntime: from the lowest finite value up, a NaN never wins (a
                    // window of NaNs gives the lowest value, at its first tap).
                    let first = taps.iter().flatten().next().copied().unwrap_or(0);
                    let lowest = (first, f32::MIN as f64);
                    let (i, v) = inside.fold(lowest, |b, (i, v)| if v > b.1 { (i, v) } else { b });
                    indices.push((plane, i));
                    v
                }
                Pool::Average => {
                    let (sum, count) = inside.fold((0.0, 0usize), |(s, k), (_, v)| (s + v, k + 1));
                    sum / if include_pad { *padded } else { count } as f64
                }
                Pool::Lp => inside
                    .map(|(_, v)| v.abs().powf(p))
                    .sum::<f64>()
                    .powf(1.0 / p),
            };
            out.push(value as f32);
        }
    }
    let mut outputs = vec![match x.dtype.is_float() {
        true => Tensor::float(x.dtype, shape.clone(), out),
        // MaxPool of integers (8-bit): the picked values, exactly.
        false => Tensor::int(
            x.dtype,
            shape.clone(),
            out.iter().map(|&v| v as i64).collect(),
        ),
    }];
    if kind == Pool::Max && call.node.outputs.len() > 1 {
        let flat = indices
            .into_iter()
            .map(|(plane, i)| {
                let i = match column_major {
                    false => i,
                    true => transpose_position(i, &spatial),
                };
                (plane * area + i) as i64
            })
            .collect();
        outputs.push(Tensor::int(crate::ir::DType::I64, shape, flat));
    }
    Ok(outputs)
}

/// The column-major flat position of row-major spatial position `i` in extents `dims`.
fn transpose_position(mut i: usize, dims: &[usize]) -> usize {
    let mut coords = vec![0; dims.len()];
    for a in (0..dims.len()).rev() {
        coords[a] = i % dims[a];
        i /= dims[a];
    }
    let mut flat = 0;
    for a in (0..dims.len()).rev() {
        flat = flat * dims[a] + coords[a];
    }
    flat
}

/// `GlobalMaxPool` / `GlobalAveragePool`: each `[n, c]` plane reduced to one value, the spatial
/// axes kept as 1.
fn global_pool(call: &OpCall<'_>, kind: Pool) -> Result<Vec<Tensor>> {
    let x = call.input(0)?;
    let (n, c, spatial) = split_input(call, x)?;
    let area: usize = spatial.iter().product();
    let xv = x.as_f64();
    let out = (0..n * c)
        .map(|plane| {
            let v = &xv[plane * area..(plane + 1) * area];
            let r = match kind {
                Pool::Max => v
                    .iter()
                    .fold(f32::MIN as f64, |b, &p| if p > b { p } else { b }),
                _ => v.iter().sum::<f64>() / area as f64,
            };
            r as f32
        })
        .collect();
    let shape = [&[n, c][..], &vec![1; spatial.len()]].concat();
    Ok(vec![Tensor::float(x.dtype, shape, out)])
}

/// `ConvTranspose(X, W, B?)`: each input element `X[n, c, i…]` adds `X · W[c, m, t…]` to
/// `Y[n, g·M/G + m, i·s + t·d − pad]` (`W` is `[C, M/G, K…]`); the output extent is
/// `s·(D − 1) + output_padding + d·(K − 1) + 1 − pads`, or `output_shape`, whose padding (and
/// `auto_pad` SAME_*'s) is split as the spec says: the odd one at the end for `SAME_UPPER`,
/// else at the start.
fn conv_transpose(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let (x, w) = (call.input(0)?, call.input(1)?);
    let (n, c, spatial) = split_input(call, x)?;
    let k = spatial.len();
    let groups = usize::try_from(call.int("group", 1))
        .ok()
        .filter(|&g| g >= 1)
        .ok_or_else(|| call.error("group must be positive"))?;
    if w.shape.len() != x.shape.len() || w.shape[0] != c || c % groups != 0 {
        return Err(call.error(format!(
            "weight {:?} does not fit input {:?} with {groups} groups",
            w.shape, x.shape
        )));
    }
    let (cg, mg) = (c / groups, w.shape[1]);
    let m = mg * groups;
    let kernel = w.shape[2..].to_vec();
    let list = |name: &str, default: usize| -> Result<Vec<usize>> {
        match call.ints(name) {
            None => Ok(vec![default; k]),
            Some(v) if v.len() == k && v.iter().all(|&x| x >= 0) => {
                Ok(v.iter().map(|&x| x as usize).collect())
            }
            Some(v) => Err(call.error(format!(
                "{name} must hold {k} non-negative values, got {v:?}"
            ))),
        }
    };
    let (strides, dilations, extra) = (
        list("strides", 1)?,
        list("dilations", 1)?,
        list("output_padding", 0)?,
    );
    if strides.contains(&0) || dilations.contains(&0) {
        return Err(call.error("strides and dilations must be positive"));
    }
    let full: Vec<usize> = (0..k)
        .map(|a| {
            strides[a] * (spatial[a].max(1) - 1)
                + extra[a]
                + dilations[a] * (kernel[a].max(1) - 1)
                + 1
        })
        .collect();
    let auto_pad = call.string("auto_pad").unwrap_or("NOTSET");
    let target: Option<Vec<usize>> = match (call.ints("output_shape"), auto_pad) {
        (Some(s), _) => {
            let s = &s[s.len().saturating_sub(k)..];
            Some(s.iter().map(|&v| v.max(0) as usize).collect())
        }
        (None, "SAME_UPPER" | "SAME_LOWER") => {
            Some((0..k).map(|a| spatial[a] * strides[a]).collect())
        }
        (None, "NOTSET" | "VALID") => None,
        (None, other) => {
            return Err(call.error(format!(
                "auto_pad must be NOTSET, VALID, SAME_UPPER or SAME_LOWER, got `{other}`"
            )))
        }
    };
    // Padding before each axis: negative where output_shape asks for more than the full output
    // (the extra positions get the bias alone).
    let (begin, out_dims): (Vec<i64>, Vec<usize>) = match target {
        Some(t) => {
            let begin = (0..k)
                .map(|a| {
                    let total = full[a] as i64 - t[a] as i64;
                    match auto_pad {
                        "SAME_UPPER" => total.div_euclid(2),
                        _ => total - total.div_euclid(2),
                    }
                })
                .collect();
            (begin, t)
        }
        None => {
            let pads = match auto_pad {
                "VALID" => vec![0; 2 * k],
                _ => list2(call, k)?,
            };
            let dims = (0..k)
                .map(|a| {
                    full[a].checked_sub(pads[a] + pads[a + k]).ok_or_else(|| {
                        call.error(format!("pads {pads:?} exceed the full output {full:?}"))
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            (pads[..k].iter().map(|&p| p as i64).collect(), dims)
        }
    };
    let bias = match call.optional(2) {
        Some(b) if b.shape != [m] => {
            return Err(call.error(format!("bias must have shape [{m}], got {:?}", b.shape)))
        }
        Some(b) => b.as_f64(),
        None => vec![0.0; m],
    };
    let shape = [&[n, m][..], &out_dims].concat();
    call.alloc(&shape)?;
    let (area, out_area): (usize, usize) = (spatial.iter().product(), out_dims.iter().product());
    let taps_n: usize = kernel.iter().product();
    let (xv, wv) = (x.as_f64(), w.as_f64());
    let mut out = vec![0f64; n * m * out_area];
    for b in 0..n {
        for oc in 0..m {
            out[(b * m + oc) * out_area..(b * m + oc + 1) * out_area].fill(bias[oc]);
        }
    }
    let coords = |mut flat: usize, dims: &[usize]| {
        let mut c = vec![0usize; dims.len()];
        for a in (0..dims.len()).rev() {
            c[a] = flat % dims[a];
            flat /= dims[a];
        }
        c
    };
    // For each input position and kernel tap, the output position it lands on, if inside.
    let landing: Vec<Vec<Option<usize>>> = (0..area)
        .map(|p| {
            let i = coords(p, &spatial);
            (0..taps_n)
                .map(|t| {
                    let tap = coords(t, &kernel);
                    let mut flat = 0usize;
                    for a in 0..k {
                        let o = (i[a] * strides[a] + tap[a] * dilations[a]) as i64 - begin[a];
                        if o < 0 || o >= out_dims[a] as i64 {
                            return None;
                        }
                        flat = flat * out_dims[a] + o as usize;
                    }
                    Some(flat)
                })
                .collect()
        })
        .collect();
    for b in 0..n {
        for ic in 0..c {
            let g = ic / cg;
            for (p, taps) in landing.iter().enumerate() {
                let v = xv[(b * c + ic) * area + p];
                for om in 0..mg {
                    let oc = g * mg + om;
                    let wbase = (ic * mg + om) * taps_n;
                    let obase = (b * m + oc) * out_area;
                    for (t, to) in taps.iter().enumerate() {
                        if let Some(o) = to {
                            out[obase + o] += v * wv[wbase + t];
                        }
                    }
                }
            }
        }
    }
    let out = out.into_iter().map(|v| v as f32).collect();
    Ok(vec![Tensor::float(x.dtype, shape, out)])
}

/// The `pads` attribute of a `k`-axis op: `2k` non-negative values, zeros when absent.
fn list2(call: &OpCall<'_>, k: usize) -> Result<Vec<usize>> {
    match call.ints("pads") {
        None => Ok(vec![0; 2 * k]),
        Some(p) if p.len() == 2 * k && p.iter().all(|&x| x >= 0) => {
            Ok(p.iter().map(|&x| x as usize).collect())
        }
        Some(p) => Err(call.error(format!(
            "pads must hold {} non-negative values, got {p:?}",
            2 * k
        ))),
    }
}
