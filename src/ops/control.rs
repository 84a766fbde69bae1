//! Control flow: `If`, `Loop` and `Scan`. Their subgraphs (graph attributes) are opaque to the
//! optimizer's rules; the node reads the values its subgraphs take from the enclosing graph as
//! extra children (see `opt::lift`). The evaluators run a subgraph through the [`Scope`] the
//! interpreter gives the call, with the enclosing graphs' values visible.

use super::infer::Infer;
use super::types::{SymDim, TensorType};
use super::value::AttrValue;
use super::{OpCall, OpDef, Tensor, Values};
use crate::ir::{Attr, Graph};
use crate::Result;

/// The control-flow ops.
pub const OPS: &[OpDef] = &[
    OpDef::onnx("If", &["else_branch", "then_branch"])
        .infer(infer_if)
        .eval(eval_if),
    OpDef::onnx("Loop", &["body"])
        .infer(infer_loop)
        .eval(eval_loop),
    OpDef::onnx(
        "Scan",
        &[
            "body",
            "num_scan_inputs",
            "scan_input_axes",
            "scan_input_directions",
            "scan_output_axes",
            "scan_output_directions",
        ],
    )
    .infer(infer_scan)
    .eval(eval_scan),
];

/// Runs subgraphs for an evaluator: the interpreter's view of the enclosing graphs.
pub trait Scope: std::fmt::Debug {
    /// Runs `graph` with its inputs bound, in order, to `inputs`, the values of the enclosing
    /// graphs visible; returns its outputs in order.
    fn run(&self, graph: &Graph, inputs: Vec<Tensor>) -> Result<Vec<Tensor>>;
}

/// The subgraph of attribute `name` in inference, if set.
fn graph_attr<'a>(call: &Infer<'a>, name: &str) -> Option<&'a Graph> {
    match call.attrs.get(name)? {
        AttrValue::Graph(g) => Some(g.graph()),
        _ => None,
    }
}

/// The element type of each output of `g` from `from` on, shapes unknown (a subgraph's dims
/// are named in its own scope).
fn output_dtypes(g: &Graph, from: usize) -> impl Iterator<Item = TensorType> + '_ {
    g.outputs.iter().skip(from).map(|o| TensorType {
        dtype: (!g.untyped.contains(&o.name)).then_some(o.dtype),
        shape: None,
    })
}

/// `If`: the then-branch's output types; a dim is kept where both branches fix it alike.
fn infer_if(call: &Infer<'_>) -> Vec<TensorType> {
    let (Some(then), Some(other)) = (
        graph_attr(call, "then_branch"),
        graph_attr(call, "else_branch"),
    ) else {
        return Vec::new();
    };
    then.outputs
        .iter()
        .zip(&other.outputs)
        .map(|(a, b)| {
            let fixed = |s: &crate::ir::Shape| -> Option<Vec<i64>> {
                s.0.iter()
                    .map(|d| match d {
                        crate::ir::Dim::Fixed(v) => Some(*v),
                        crate::ir::Dim::Sym(_) => None,
                    })
                    .collect()
            };
            let shaped = !then.unshaped.contains(&a.name) && !other.unshaped.contains(&b.name);
            let shape = match (fixed(&a.shape), fixed(&b.shape)) {
                (Some(x), Some(y)) if x == y && shaped => {
                    Some(x.into_iter().map(SymDim::Known).collect())
                }
                _ => None,
            };
            let typed = !then.untyped.contains(&a.name) && !other.untyped.contains(&b.name);
            TensorType {
                dtype: typed.then_some(a.dtype),
                shape: if typed { shape } else { None },
            }
        })
        .collect()
}

/// `Loop`: the carried values' and scan outputs' element types, from the body's outputs.
fn infer_loop(call: &Infer<'_>) -> Vec<TensorType> {
    graph_attr(call, "body").map_or_else(Vec::new, |g| output_dtypes(g, 1).collect())
}

/// `Scan`: the states' and scan outputs' element types, from the body's outputs.
fn infer_scan(call: &Infer<'_>) -> Vec<TensorType> {
    graph_attr(call, "body").map_or_else(Vec::new, |g| output_dtypes(g, 0).collect())
}

/// The subgraph of attribute `name` of the node being evaluated.
fn subgraph<'a>(call: &OpCall<'a>, name: &str) -> Result<&'a Graph> {
    match call.attrs().get(name) {
        Some(Attr::Graph(g)) => Ok(g),
        _ => Err(call.error(format!("attribute `{name}` (a graph) is required"))),
    }
}

/// The scope to run subgraphs in.
fn scope<'a>(call: &OpCall<'a>) -> Result<&'a dyn Scope> {
    call.scope
        .ok_or_else(|| call.error("a control-flow op runs only inside a graph"))
}

/// The single boolean of a condition input.
fn condition(call: &OpCall<'_>, t: &Tensor, what: &str) -> Result<bool> {
    match (&t.values, t.numel()) {
        (Values::Bool(v), 1) => Ok(v[0]),
        _ => Err(call.error(format!(
            "{what} must be one bool, got a {} tensor of shape {:?}",
            t.dtype, t.shape
        ))),
    }
}

/// Runs `g` and checks it returned `want` outputs.
fn run_checked(
    call: &OpCall<'_>,
    scope: &dyn Scope,
    g: &Graph,
    inputs: Vec<Tensor>,
    what: &str,
) -> Result<Vec<Tensor>> {
    if inputs.len() != g.inputs.len() {
        return Err(call.error(format!(
            "{what} takes {} inputs, the op gives it {}",
            g.inputs.len(),
            inputs.len()
        )));
    }
    scope.run(g, inputs)
}

fn eval_if(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let cond = condition(call, call.input(0)?, "the condition")?;
    let (name, g) = if cond {
        ("then_branch", subgraph(call, "then_branch")?)
    } else {
        ("else_branch", subgraph(call, "else_branch")?)
    };
    let outs = run_checked(call, scope(call)?, g, Vec::new(), name)?;
    let want = call.node.outputs.len();
    if outs.len() < want {
        return Err(call.error(format!(
            "`{name}` has {} outputs, the node {want}",
            outs.len()
        )));
    }
    Ok(outs)
}

/// The real inputs of a node: its inputs without the trailing captures.
fn own_inputs<'a, 'c>(call: &'c OpCall<'a>) -> &'c [Option<&'a Tensor>] {
    &call.inputs[..call.node.inputs.len().min(call.inputs.len())]
}

/// Stacks equally shaped tensors along a new axis `axis` (0 ≤ axis ≤ rank).
fn stack(call: &OpCall<'_>, parts: &[Tensor], axis: usize, what: &str) -> Result<Tensor> {
    let first = &parts[0];
    if let Some(p) = parts
        .iter()
        .find(|p| p.shape != first.shape || p.dtype != first.dtype)
    {
        return Err(call.error(format!(
            "{what}: iterations give {} {:?} and {} {:?}; a scan output keeps one type and shape",
            first.dtype, first.shape, p.dtype, p.shape
        )));
    }
    let outer: usize = first.shape[..axis].iter().product();
    let inner: usize = first.shape[axis..].iter().product();
    let mut shape = first.shape.clone();
    shape.insert(axis, parts.len());
    call.alloc(&shape)?;
    macro_rules! gather {
        ($variant:ident) => {{
            let slices = parts
                .iter()
                .map(|p| match &p.values {
                    Values::$variant(v) => Ok(v.as_slice()),
                    _ => Err(call.error(format!("{what}: mixed element storage"))),
                })
                .collect::<Result<Vec<_>>>()?;
            let mut out = Vec::with_capacity(outer * inner * parts.len());
            for o in 0..outer {
                for s in &slices {
                    out.extend_from_slice(&s[o * inner..(o + 1) * inner]);
                }
            }
            Values::$variant(out)
        }};
    }
    let values = match &first.values {
        Values::Float(_) => gather!(Float),
        Values::Int(_) => gather!(Int),
        Values::Bool(_) => gather!(Bool),
    };
    Ok(Tensor {
        dtype: first.dtype,
        shape,
        values,
    })
}

/// Index `index` of `t` along `axis`, that axis removed.
fn slice_at(t: &Tensor, axis: usize, index: usize) -> Tensor {
    let outer: usize = t.shape[..axis].iter().product();
    let inner: usize = t.shape[axis + 1..].iter().product();
    let n = t.shape[axis];
    let mut shape = t.shape.clone();
    shape.remove(axis);
    macro_rules! take {
        ($v:expr, $variant:ident) => {{
            let mut out = Vec::with_capacity(outer * inner);
            for o in 0..outer {
                let at = (o * n + index) * inner;
                out.extend_from_slice(&$v[at..at + inner]);
            }
            Values::$variant(out)
        }};
    }
    let values = match &t.values {
        Values::Float(v) => take!(v, Float),
        Values::Int(v) => take!(v, Int),
        Values::Bool(v) => take!(v, Bool),
    };
    Tensor {
        dtype: t.dtype,
        shape,
        values,
    }
}

/// An empty scan output: no iteration ran. Its element shape comes from the body's declared
/// output where fully fixed, else it is one-dimensional.
fn empty_scan_output(call: &OpCall<'_>, g: &Graph, output: usize) -> Result<Tensor> {
    let declared = &g.outputs[output];
    if g.untyped.contains(&declared.name) {
        return Err(call.error(format!(
            "no iteration ran and the body declares no type for `{}`: the empty output's type \
             is unknown",
            declared.name
        )));
    }
    let mut shape = vec![0usize];
    if !g.unshaped.contains(&declared.name) {
        for d in &declared.shape.0 {
            match d {
                crate::ir::Dim::Fixed(v) if *v >= 0 => shape.push(*v as usize),
                _ => {
                    shape.truncate(1);
                    break;
                }
            }
        }
    }
    call.alloc(&shape)?;
    Ok(match declared.dtype {
        d if d.is_float() => Tensor::float(d, shape, Vec::new()),
        crate::ir::DType::Bool => Tensor::bool(shape, Vec::new()),
        d => Tensor::int(d, shape, Vec::new()),
    })
}

fn eval_loop(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let scope = scope(call)?;
    let body = subgraph(call, "body")?;
    let own = own_inputs(call);
    let trip = match own.first().copied().flatten() {
        Some(t) => match (&t.values, t.numel()) {
            (Values::Int(v), 1) => Some(v[0]),
            _ => {
                return Err(call.error(format!(
                    "the trip count must be one integer, got a {} tensor of shape {:?}",
                    t.dtype, t.shape
                )))
            }
        },
        None => None,
    };
    let cond_given = own.get(1).copied().flatten();
    let mut cond = match cond_given {
        Some(t) => condition(call, t, "the loop condition")?,
        None => true,
    };
    let mut carried: Vec<Tensor> = own
        .iter()
        .skip(2)
        .map(|t| {
            t.cloned()
                .ok_or_else(|| call.error("a loop-carried value is absent"))
        })
        .collect::<Result<_>>()?;
    let n = carried.len();
    if body.outputs.len() < n + 1 {
        return Err(call.error(format!(
            "the body has {} outputs; it needs the condition and {n} carried values",
            body.outputs.len()
        )));
    }
    let k = body.outputs.len() - 1 - n;
    let mut scans: Vec<Vec<Tensor>> = vec![Vec::new(); k];
    let mut i: i64 = 0;
    while trip.is_none_or(|m| i < m) && (cond_given.is_none() || cond) {
        // A loop with neither a trip count nor a condition stops only here, with an error.
        call.limits.loop_iteration(&call.tag(), i as u64)?;
        let mut inputs = Vec::with_capacity(n + 2);
        inputs.push(Tensor::int(crate::ir::DType::I64, Vec::new(), vec![i]));
        inputs.push(Tensor::bool(Vec::new(), vec![cond]));
        inputs.append(&mut carried);
        let mut outs = run_checked(call, scope, body, inputs, "the loop body")?.into_iter();
        let next_cond = outs
            .next()
            .expect("checked: the body has the condition output");
        if cond_given.is_some() {
            cond = condition(call, &next_cond, "the body's condition output")?;
        }
        carried = outs.by_ref().take(n).collect();
        for (scan, t) in scans.iter_mut().zip(outs) {
            scan.push(t);
        }
        i += 1;
    }
    let mut results = carried;
    for (j, parts) in scans.into_iter().enumerate() {
        results.push(if parts.is_empty() {
            empty_scan_output(call, body, 1 + n + j)?
        } else {
            stack(call, &parts, 0, "a scan output of the loop")?
        });
    }
    Ok(results)
}

/// A per-scan-input or per-scan-output attribute list, or zeros when unset; its length must be
/// `count`.
fn per_scan(call: &OpCall<'_>, name: &str, count: usize) -> Result<Vec<i64>> {
    match call.ints(name) {
        None => Ok(vec![0; count]),
        Some(v) if v.len() == count => Ok(v.to_vec()),
        Some(v) => Err(call.error(format!(
            "`{name}` has {} entries for {count} scan values",
            v.len()
        ))),
    }
}

/// How one `Scan` steps: the directions and axes of its scan inputs and outputs.
struct Steps {
    in_axes: Vec<i64>,
    in_dirs: Vec<i64>,
    out_axes: Vec<i64>,
    out_dirs: Vec<i64>,
}

fn eval_scan(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let scope = scope(call)?;
    let body = subgraph(call, "body")?;
    let own = own_inputs(call);
    // Scan-8 takes `sequence_lens` first (optional, so often absent) and a batch axis in front
    // of every input; Scan-9 and later take no absent input.
    let batched = own.first().is_some_and(|t| t.is_none()) || call.ints("directions").is_some();
    let own = if batched { &own[1..] } else { own };
    let m = usize::try_from(call.int("num_scan_inputs", -1))
        .ok()
        .filter(|&m| m >= 1 && m <= own.len())
        .ok_or_else(|| {
            call.error(format!(
                "`num_scan_inputs` must lie in 1..={} (the node's inputs)",
                own.len()
            ))
        })?;
    let n = own.len() - m;
    let inputs: Vec<&Tensor> = own
        .iter()
        .map(|t| t.ok_or_else(|| call.error("a state or scan input of Scan is absent")))
        .collect::<Result<_>>()?;
    if body.outputs.len() < n {
        return Err(call.error(format!(
            "the body has {} outputs for {n} states",
            body.outputs.len()
        )));
    }
    let k = body.outputs.len() - n;
    if !batched {
        let steps = Steps {
            in_axes: per_scan(call, "scan_input_axes", m)?,
            in_dirs: per_scan(call, "scan_input_directions", m)?,
            out_axes: per_scan(call, "scan_output_axes", k)?,
            out_dirs: per_scan(call, "scan_output_directions", k)?,
        };
        return scan(call, scope, body, &inputs, n, &steps);
    }
    if call.optional(0).is_some() {
        return Err(call.error(
            "Scan-8 with `sequence_lens` (sequences of different lengths in one batch) is not \
             supported",
        ));
    }
    let steps = Steps {
        in_axes: vec![0; m],
        in_dirs: per_scan(call, "directions", m)?,
        out_axes: vec![0; k],
        out_dirs: vec![0; k],
    };
    let batch = inputs
        .first()
        .and_then(|t| t.shape.first())
        .copied()
        .unwrap_or(0);
    if let Some(t) = inputs.iter().find(|t| t.shape.first() != Some(&batch)) {
        return Err(call.error(format!(
            "Scan-8 inputs share their first (batch) axis: {batch} and shape {:?}",
            t.shape
        )));
    }
    let mut per_output: Vec<Vec<Tensor>> = vec![Vec::with_capacity(batch); n + k];
    for b in 0..batch {
        let rows: Vec<Tensor> = inputs.iter().map(|t| slice_at(t, 0, b)).collect();
        let rows: Vec<&Tensor> = rows.iter().collect();
        for (j, t) in scan(call, scope, body, &rows, n, &steps)?
            .into_iter()
            .enumerate()
        {
            per_output[j].push(t);
        }
    }
    per_output
        .iter()
        .map(|parts| stack(call, parts, 0, "a Scan-8 output"))
        .collect()
}

/// Scan-9's semantics: `inputs` holds `n` states, then the scan inputs.
fn scan(
    call: &OpCall<'_>,
    scope: &dyn Scope,
    body: &Graph,
    inputs: &[&Tensor],
    n: usize,
    steps: &Steps,
) -> Result<Vec<Tensor>> {
    let k = body.outputs.len() - n;
    if let Some(d) = steps
        .in_dirs
        .iter()
        .chain(&steps.out_dirs)
        .find(|d| !(0..=1).contains(*d))
    {
        return Err(call.error(format!("a scan direction is 0 or 1, not {d}")));
    }
    let mut axes = Vec::with_capacity(inputs.len() - n);
    let mut length = None;
    for (j, t) in inputs[n..].iter().enumerate() {
        let ax = super::tensor::axis(steps.in_axes[j], t.shape.len()).map_err(|e| call.error(e))?;
        let len = t.shape[ax];
        if length.is_some_and(|l| l != len) {
            return Err(call.error(format!(
                "scan input {j} has {len} steps along axis {ax}, an earlier one {}",
                length.unwrap_or(0)
            )));
        }
        length = Some(len);
        axes.push(ax);
    }
    let length = length.unwrap_or(0);
    let mut states: Vec<Tensor> = inputs[..n].iter().map(|t| (*t).clone()).collect();
    let mut scans: Vec<Vec<Tensor>> = vec![Vec::with_capacity(length); k];
    for step in 0..length {
        let mut feed = std::mem::take(&mut states);
        for (j, t) in inputs[n..].iter().enumerate() {
            let at = if steps.in_dirs[j] == 1 {
                length - 1 - step
            } else {
                step
            };
            feed.push(slice_at(t, axes[j], at));
        }
        let mut outs = run_checked(call, scope, body, feed, "the scan body")?.into_iter();
        states = outs.by_ref().take(n).collect();
        for (scan, t) in scans.iter_mut().zip(outs) {
            scan.push(t);
        }
    }
    let mut results = states;
    for (j, mut parts) in scans.into_iter().enumerate() {
        if parts.is_empty() {
            results.push(empty_scan_output(call, body, n + j)?);
            continue;
        }
        if steps.out_dirs[j] == 1 {
            parts.reverse();
        }
        let rank = parts[0].shape.len() + 1;
        let ax = super::tensor::axis(steps.out_axes[j], rank).map_err(|e| call.error(e))?;
        results.push(stack(call, &parts, ax, "a scan output")?);
    }
    Ok(results)
}
