//! The model-local function body of `com.microsoft::MatMulNBits`, written by hand: the other
//! contrib bodies are their inline rules read as functions ([`super::rule_body`]), but the
//! inline rule of MatMulNBits re-lays out initializers at save time, which a function cannot do
//! (its inputs are arbitrary tensors). This body unpacks the packed codes with standard ops:
//!
//! ```text
//! m = 2^bits, step = bits / 4                       (from the call's `bits`)
//! codes[n, b, j]  = j-th value of B[n, b, :] (low bits first): a byte c holds c mod m and
//!                   c div m; both are interleaved, then every step-th kept (8 bits: c alone)
//! zp[n, b]        = the same unpacking of zero_points, the first ⌈K/B⌉ kept (none: m / 2)
//! W[n, k]         = (codes − zp) · scales[n, b], the rows past K (padding of B) dropped
//! Y               = Gemm(A as [M, K], W, bias; transB) as [.., N]
//! ```
//!
//! K, N and the block size come from the shapes of A and B (MatMulNBits requires them to
//! match its attributes). `bias` is Gemm's optional C, so one body serves calls with and
//! without it; zero points are a required input of the unpacking, so a graph gets the body of
//! its calls' kind ([`body_for`]): all with zero points, or all without.

use super::rule_body::BODY_OPSET;
use crate::ir::{DType, Graph};
use crate::onnx::proto::{self, attribute_type as at, AttributeProto, FunctionProto, NodeProto};

/// The op this body stands for.
pub const OP: (&str, &str) = ("com.microsoft", "MatMulNBits");

/// The body of MatMulNBits for the calls of `graph`, when they all fit one body: no `g_idx`,
/// at most six inputs and one output, and all with zero points or all without. `None` when
/// `graph` has no such calls, or calls of both kinds.
pub fn body_for(graph: &Graph) -> Option<FunctionProto> {
    let calls: Vec<_> = graph
        .nodes
        .iter()
        .filter(|n| (n.domain.as_str(), n.op_type.as_str()) == OP)
        .collect();
    let present = |n: &crate::ir::Node, i: usize| n.inputs.get(i).is_some_and(|v| !v.is_empty());
    let fits = |n: &&crate::ir::Node| {
        n.inputs.len() <= 6 && n.outputs.len() == 1 && (0..3).all(|i| present(n, i))
    };
    if calls.is_empty() || !calls.iter().all(fits) || calls.iter().any(|n| present(n, 4)) {
        return None;
    }
    let zero_points = present(calls[0], 3);
    calls
        .iter()
        .all(|n| present(n, 3) == zero_points)
        .then(|| body(zero_points))
}

/// The body for calls with (`zero_points`) or without zero points.
pub fn body(zero_points: bool) -> FunctionProto {
    let mut b = Body::default();
    let (one, minus_one) = (b.ints(&[1]), b.ints(&[-1]));
    let (zero, to_end) = (b.ints(&[0]), b.ints(&[i64::MAX]));
    let (flat_rows, flat_last2) = (b.ints(&[0, -1]), b.ints(&[0, 0, -1]));
    let axis_2 = b.ints(&[2]);
    let bits = b.node("Constant", &[], vec![int_ref("value_int", "bits")]);
    let two = b.int(2);
    let four = b.int(4);
    let modulus = b.node("Pow", &[&two, &bits], vec![]);
    let step = b.node("Div", &[&bits, &four], vec![]);
    let step = b.node("Reshape", &[&step, &one], vec![]);
    // B [N, blocks, blob] → codes [N, blocks, block_size].
    let pairs = b.unpack("B", &modulus);
    let pairs = b.node("Reshape", &[&pairs, &flat_last2], vec![]);
    let codes = b.node("Slice", &[&pairs, &zero, &to_end, &axis_2, &step], vec![]);
    let zero_point = if zero_points {
        // zero_points [N, bytes] (or flat) → [N, blocks, 1].
        let n = b.shape("B", 0, 1);
        let rows = b.node("Concat", &[&n, &minus_one], vec![int("axis", 0)]);
        let zp = b.node("Reshape", &["zero_points", &rows], vec![]);
        let pairs = b.unpack(&zp, &modulus);
        let pairs = b.node("Reshape", &[&pairs, &flat_rows], vec![]);
        let blocks = b.shape("B", 1, 2);
        let end = b.node("Mul", &[&blocks, &step], vec![]);
        let zp = b.node("Slice", &[&pairs, &zero, &end, &one, &step], vec![]);
        b.node("Unsqueeze", &[&zp, &minus_one], vec![])
    } else {
        b.node("Div", &[&modulus, &two], vec![])
    };
    let centered = b.node("Sub", &[&codes, &zero_point], vec![]);
    let centered = b.node("CastLike", &[&centered, "scales"], vec![]);
    let column_blocks = b.shape("B", 0, 2);
    let scale_shape = b.node("Concat", &[&column_blocks, &one], vec![int("axis", 0)]);
    let scales = b.node("Reshape", &["scales", &scale_shape], vec![]);
    let weight = b.node("Mul", &[&centered, &scales], vec![]);
    let weight = b.node("Reshape", &[&weight, &flat_rows], vec![]);
    let k = b.shape("A", -1, i64::MAX);
    let weight = b.node("Slice", &[&weight, &zero, &k, &one], vec![]);
    let rows = b.node("Concat", &[&minus_one, &k], vec![int("axis", 0)]);
    let a = b.node("Reshape", &["A", &rows], vec![]);
    let product = b.node("Gemm", &[&a, &weight, "bias"], vec![int("transB", 1)]);
    let (outer, n) = (b.shape("A", 0, -1), b.shape("B", 0, 1));
    let out_shape = b.node("Concat", &[&outer, &n], vec![int("axis", 0)]);
    b.named("Reshape", &[&product, &out_shape], vec![], "Y");
    FunctionProto {
        name: OP.1.into(),
        domain: OP.0.into(),
        input: ["A", "B", "scales", "zero_points", "g_idx", "bias"]
            .map(String::from)
            .to_vec(),
        output: vec!["Y".into()],
        node: b.nodes,
        // onnxruntime's default of `bits`; K, N and block_size are read from the shapes.
        attribute_proto: vec![int("bits", 4)],
        opset_import: vec![proto::OperatorSetIdProto {
            domain: String::new(),
            version: BODY_OPSET,
        }],
        ..Default::default()
    }
}

/// An integer attribute.
fn int(name: &str, value: i64) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: at::INT,
        i: value,
        ..Default::default()
    }
}

/// An integer attribute taking the call's attribute `reference`.
fn int_ref(name: &str, reference: &str) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: at::INT,
        ref_attr_name: reference.into(),
        ..Default::default()
    }
}

/// The nodes being written, each output named after its node.
#[derive(Default)]
struct Body {
    nodes: Vec<NodeProto>,
}

impl Body {
    /// `op(inputs; attrs)`, its output's name.
    fn node(&mut self, op: &str, inputs: &[&str], attrs: Vec<AttributeProto>) -> String {
        let out = format!("{op}_{}", self.nodes.len());
        self.named(op, inputs, attrs, &out);
        out
    }

    /// `op(inputs; attrs)` writing `out`.
    fn named(&mut self, op: &str, inputs: &[&str], attrs: Vec<AttributeProto>, out: &str) {
        self.nodes.push(NodeProto {
            name: format!("{op}_{out}"),
            op_type: op.into(),
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: vec![out.into()],
            attribute: attrs,
            ..Default::default()
        });
    }

    /// A scalar int64 constant.
    fn int(&mut self, value: i64) -> String {
        self.node("Constant", &[], vec![int("value_int", value)])
    }

    /// A 1-D int64 constant.
    fn ints(&mut self, values: &[i64]) -> String {
        let attr = AttributeProto {
            name: "value_ints".into(),
            r#type: at::INTS,
            ints: values.to_vec(),
            ..Default::default()
        };
        self.node("Constant", &[], vec![attr])
    }

    /// `Shape(x; start, end)` (`i64::MAX`: to the end).
    fn shape(&mut self, x: &str, start: i64, end: i64) -> String {
        let mut attrs = vec![int("start", start)];
        if end != i64::MAX {
            attrs.push(int("end", end));
        }
        self.node("Shape", &[x], attrs)
    }

    /// The bytes of `x` split into (`byte mod m`, `byte div m`) along a new last axis, int64.
    fn unpack(&mut self, x: &str, modulus: &str) -> String {
        let to = int("to", i64::from(DType::I64.onnx_code()));
        let bytes = self.node("Cast", &[x], vec![to]);
        let high = self.node("Div", &[&bytes, modulus], vec![]);
        let shifted = self.node("Mul", &[&high, modulus], vec![]);
        let low = self.node("Sub", &[&bytes, &shifted], vec![]);
        let last = self.ints(&[-1]);
        let low = self.node("Unsqueeze", &[&low, &last], vec![]);
        let high = self.node("Unsqueeze", &[&high, &last], vec![]);
        self.node("Concat", &[&low, &high], vec![int("axis", -1)])
    }
}
