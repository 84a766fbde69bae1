//! Griffin's recurrent block (RecurrentGemma) with its conv and RG-LRU states carried between
//! calls, the prompt-length recurrence as an ONNX `Scan` over time.
//!
//! The block takes the normed input `x` `[B, S, hidden]` on two branches: `linear_y` then GELU
//! (the gate), and `linear_x` then the depthwise causal convolution of
//! [`causal_conv_with_state`] (`conv_1d`, biased; conv state `[B, lru_width, conv1d_width − 1]`)
//! into the Real-Gated Linear Recurrent Unit. Per channel, with the input gate `i` and the
//! recurrence gate `r` (sigmoids of block-diagonal projections: `heads` blocks of `lru_width /
//! heads` channels, weights `[heads, block, block]` and biases `[heads, block]`), `log a =
//! −8 · r · softplus(recurrent_param)`, `a = exp(log a)`, the recurrence is `h_t = a_t · h_{t−1} +
//! √(1 − exp(2 log a_t)) · i_t · x_t`. A position whose `position_ids` entry is 0 starts a new
//! sequence, as transformers resets there: its decay is 0 and its input is not scaled by the
//! square root (`h_t = i_t · x_t`). Each step's `h_t` is the output, times the gate branch,
//! projected back by `linear_out`.
//!
//! The decays and inputs are computed for the whole call, then an ONNX **`Scan`** over the time
//! axis carries `h` `[B, lru_width]` (body: `Mul`, `Add`, `Identity`; it reads nothing from the
//! enclosing graph), its final value the new RG-LRU state. A closed form would need the
//! products of the decays between every pair of steps, `S × S × lru_width` values; the `Scan`
//! is exact for every `S` (a prompt, or one token per decode step: a one-step Scan) and costs
//! `O(S · lru_width)` multiply-adds in `S` sequential body steps, memory `O(S · lru_width)`;
//! per decode step it is constant, whatever the context length. The gates, decays and the
//! recurrence run in f32 whatever the model dtype (transformers keeps the state in f32); the
//! state is stored between calls in the model dtype. The block-diagonal gate weights are 3-D
//! MatMul operands (`[B, S, heads, 1, block] @ [heads, block, block]`), so `--quant`, which
//! quantizes 2-D weights, leaves them in float; `linear_x`, `linear_y` and `linear_out` are
//! plain MatMuls and quantized.

use super::mixer_ops::{from_f32, to_f32};
use super::short_conv::{causal_conv_with_state, ShortConv};
use super::ssm::SsmState;
use super::{gelu, linear};
use crate::config::Gelu;
use crate::ir::{Attr, DType, Dim, GraphBuilder, Initializer, Shape, TensorData, TensorSource};

/// The shape of a Griffin recurrent block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecurrentBlock {
    /// The residual stream's width.
    pub hidden: usize,
    /// The recurrence's channels (`lru_width`).
    pub width: usize,
    /// The gates' diagonal blocks (`num_attention_heads`), each `width / blocks` wide.
    pub blocks: usize,
    /// The convolution's kernel width (`conv1d_width`, at least 2).
    pub kernel: usize,
    /// The activation of the gate branch (`hidden_activation`).
    pub gelu: Gelu,
}

impl RecurrentBlock {
    /// The convolution whose state the block carries (always biased).
    pub fn conv(&self) -> ShortConv {
        ShortConv {
            channels: self.width,
            kernel: self.kernel,
            bias: true,
        }
    }
}

/// The recurrent block of module `module` over the normed input `x` `[B, S, hidden]`, continuing
/// from `state` (conv state `[B, width, kernel − 1]`, RG-LRU state `[B, width]`), the sequence
/// restarting where `position_ids` (`[B, S]`, i64) is 0. Returns the output `[B, S, hidden]`.
pub fn recurrent_block(
    b: &mut GraphBuilder,
    x: &str,
    module: &str,
    m: RecurrentBlock,
    state: SsmState<'_>,
    position_ids: &str,
    dtype: DType,
) -> String {
    let (w, h, blocks) = (m.width, m.hidden, m.blocks);
    let y = linear(b, x, &format!("{module}.linear_y"), h, w, true, dtype);
    let y = gelu(b, &y, m.gelu);
    let xs = linear(b, x, &format!("{module}.linear_x"), h, w, true, dtype);
    let conv_module = format!("{module}.conv_1d");
    let xs = causal_conv_with_state(b, &xs, &conv_module, m.conv(), state.conv, dtype);
    let xs = to_f32(b, &xs, dtype);

    let lru = format!("{module}.rg_lru");
    let block = w / blocks;
    let as_blocks = b.const_i64(&[0, 0, blocks as i64, 1, block as i64]);
    let blocked = b.op("Reshape", &[&xs, &as_blocks], vec![]);
    let flat = b.const_i64(&[0, 0, w as i64]);
    let gate = |b: &mut GraphBuilder, name: &str| {
        let weight = b.initializer(Initializer {
            name: format!("{lru}.{name}_weight"),
            dtype: DType::F32,
            shape: vec![blocks, block, block],
            source: Some(TensorSource::Checkpoint(format!("{lru}.{name}_weight"))),
        });
        let bias = b.initializer(Initializer {
            name: format!("{lru}.{name}_bias"),
            dtype: DType::F32,
            shape: vec![w],
            source: Some(TensorSource::Reshape {
                source: Box::new(TensorSource::Checkpoint(format!("{lru}.{name}_bias"))),
                shape: vec![w],
            }),
        });
        let projected = b.op("MatMul", &[&blocked, &weight], vec![]);
        let projected = b.op("Reshape", &[&projected, &flat], vec![]);
        let biased = b.op("Add", &[&projected, &bias], vec![]);
        b.op("Sigmoid", &[&biased], vec![])
    };
    let input_gate = gate(b, "input_gate");
    let recurrence_gate = gate(b, "recurrent_gate");
    let param = b.initializer(Initializer {
        name: format!("{lru}.recurrent_param"),
        dtype: DType::F32,
        shape: vec![w],
        source: Some(TensorSource::Checkpoint(format!("{lru}.recurrent_param"))),
    });

    // log a = −8 · r · softplus(recurrent_param); a and a² as transformers takes them.
    let softplus = b.op("Softplus", &[&param], vec![]);
    let minus8 = b.constant(TensorData::from_f32(vec![], &[-8.0]));
    let scaled = b.op("Mul", &[&recurrence_gate, &minus8], vec![]);
    let log_a = b.op("Mul", &[&scaled, &softplus], vec![]);
    let decay = b.op("Exp", &[&log_a], vec![]);
    let two = b.constant(TensorData::from_f32(vec![], &[2.0]));
    let log_a2 = b.op("Mul", &[&log_a, &two], vec![]);
    let a2 = b.op("Exp", &[&log_a2], vec![]);
    let one = b.constant(TensorData::from_f32(vec![], &[1.0]));
    let rest = b.op("Sub", &[&one, &a2], vec![]);
    let multiplier = b.op("Sqrt", &[&rest], vec![]);

    // A position 0 restarts the sequence: no decay, no normalisation.
    let zero_i = b.scalar_i64(0);
    let reset = b.op("Equal", &[position_ids, &zero_i], vec![]);
    let last = b.const_i64(&[-1]);
    let reset = b.op("Unsqueeze", &[&reset, &last], vec![]);
    let multiplier = b.op("Where", &[&reset, &one, &multiplier], vec![]);
    let zero = b.constant(TensorData::from_f32(vec![], &[0.0]));
    let decay = b.op("Where", &[&reset, &zero, &decay], vec![]);
    let gated = b.op("Mul", &[&xs, &input_gate], vec![]);
    let input = b.op("Mul", &[&gated, &multiplier], vec![]);

    let past = to_f32(b, state.past, dtype);
    let body = scan_body(&lru, w);
    let (final_state, hs) = (b.fresh_name("Scan"), b.fresh_name("Scan"));
    b.node(
        "",
        "Scan",
        &[&past, &decay, &input],
        vec![
            ("body", Attr::Graph(Box::new(body))),
            ("num_scan_inputs", Attr::Int(2)),
            ("scan_input_axes", Attr::Ints(vec![1, 1])),
            ("scan_output_axes", Attr::Ints(vec![1])),
        ],
        vec![final_state.clone(), hs.clone()],
    );
    let out_dtype = vec![("to", Attr::Int(dtype.onnx_code() as i64))];
    b.op_into("Cast", &[&final_state], out_dtype, state.present);
    // [B, S, width] again (the Scan's outputs carry their element types only).
    let hs = b.op("Reshape", &[&hs, &flat], vec![]);
    let hs = from_f32(b, &hs, dtype);
    let gated = b.op("Mul", &[&hs, &y], vec![]);
    linear(
        b,
        &gated,
        &format!("{module}.linear_out"),
        w,
        h,
        true,
        dtype,
    )
}

/// The `Scan` body of one time step (all f32): inputs the state `h`, the step's decay and
/// input (`[B, width]` each); outputs the new state `decay · h + input` and the same value as
/// the step's output. It reads nothing from the enclosing graph; its values are named under
/// `{module}/scan` (unique in the model).
fn scan_body(module: &str, width: usize) -> crate::ir::Graph {
    let mut body = GraphBuilder::new(&format!("{module}.scan_body"));
    let scope = format!("{module}/scan");
    body.set_scope(&scope);
    let row = || Shape(vec![Dim::sym("batch"), width.into()]);
    let named = |part: &str| format!("{scope}/{part}");
    let h = body.input(&named("h"), DType::F32, row());
    let decay = body.input(&named("decay"), DType::F32, row());
    let input = body.input(&named("input"), DType::F32, row());
    let kept = body.op("Mul", &[&decay, &h], vec![]);
    let next = named("h_next");
    body.op_into("Add", &[&kept, &input], vec![], &next);
    let out = named("h_out");
    body.op_into("Identity", &[&next], vec![], &out);
    body.output(&next, DType::F32, row());
    body.output(&out, DType::F32, row());
    body.finish()
}
