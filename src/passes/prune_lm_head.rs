//! `--features prune-lm-head`: the LM head computes the logits of the last position only.
//!
//! The decoder's final hidden states `[batch, seq, H]` are narrowed to `[batch, 1, H]` by a
//! `Gather` (indices `[-1]`, axis 1) between the final norm and the head MatMul, so the head
//! and everything after it (bias, soft-cap, scaling) run on one position and `logits` is
//! `[batch, 1, vocab]`. The final norm stays on every position, where the optimizer fuses it
//! with the last residual add; it is per position, so the gathered logits are exactly the
//! full build's logits at position `seq - 1`. With right-padded batches that position is a
//! pad for the shorter rows: prompts must be left-padded.

use crate::ir::{Attr, Dim, Graph, Initializer, Node, TensorData, TensorSource};
use crate::Error;

/// The graph output narrowed to the last position.
const LOGITS: &str = "logits";
/// The `[1]` int64 indices initializer of the inserted Gather.
const LAST_INDEX: &str = "lm_head.last_position_index";
/// The gathered hidden states, input of the head MatMul.
const LAST_HIDDEN: &str = "lm_head.last_position_hidden";
/// Position-wise ops the walk from `logits` back to the head MatMul passes through.
const ELEMENTWISE: [&str; 6] = ["Add", "Sub", "Mul", "Div", "Tanh", "Cast"];

/// Rewrites a decoder graph so that its LM head sees only the last position: the MatMul that
/// produces `logits` (through element-wise ops with constants) reads `Gather(x, [-1], axis=1)`
/// and the `logits` output is declared `[batch, 1, vocab]`. Errors (naming what is missing)
/// when the graph has no `logits` output of rank 3 or no head MatMul behind it.
pub fn prune_lm_head(graph: &mut Graph) -> crate::Result<()> {
    let out = graph
        .outputs
        .iter_mut()
        .find(|o| o.name == LOGITS)
        .ok_or_else(|| {
            Error::Usage(
                "--features prune-lm-head applies to decoders: the graph has no `logits` output"
                    .into(),
            )
        })?;
    if out.shape.0.len() != 3 {
        return Err(Error::Graph(format!(
            "prune-lm-head: `logits` has rank {}, expected [batch, sequence, vocab]",
            out.shape.0.len()
        )));
    }
    out.shape.0[1] = Dim::from(1usize);
    let head = head_matmul(graph)?;
    let hidden = graph.nodes[head].inputs[0].clone();
    graph.initializers.push(Initializer {
        name: LAST_INDEX.into(),
        dtype: crate::ir::DType::I64,
        shape: vec![1],
        source: Some(TensorSource::Inline(TensorData::from_i64(vec![1], &[-1]))),
    });
    graph.nodes[head].inputs[0] = LAST_HIDDEN.into();
    let gather = Node {
        name: "lm_head/Gather_last_position".into(),
        domain: String::new(),
        op_type: "Gather".into(),
        inputs: vec![hidden, LAST_INDEX.into()],
        outputs: vec![LAST_HIDDEN.into()],
        attrs: [("axis".to_string(), Attr::Int(1))].into(),
    };
    graph.nodes.insert(head, gather);
    graph.validate()
}

/// The index of the MatMul whose result becomes `logits`, found by walking back from
/// `logits` through [`ELEMENTWISE`] ops whose other inputs are initializers.
fn head_matmul(graph: &Graph) -> crate::Result<usize> {
    let constant = |name: &str| graph.initializers.iter().any(|i| i.name == name);
    let mut value = LOGITS.to_string();
    loop {
        let i = graph
            .nodes
            .iter()
            .position(|n| n.outputs.contains(&value))
            .ok_or_else(|| {
                Error::Graph(format!("prune-lm-head: `{value}` has no producing node"))
            })?;
        let node = &graph.nodes[i];
        if node.op_type == "MatMul" && node.domain.is_empty() {
            return Ok(i);
        }
        let computed: Vec<&String> = node.inputs.iter().filter(|v| !constant(v)).collect();
        match computed.as_slice() {
            [only] if ELEMENTWISE.contains(&node.op_type.as_str()) => value = (*only).clone(),
            _ => {
                return Err(Error::Graph(format!(
                    "prune-lm-head: `logits` comes from {} node `{}`, not from an LM head \
                     MatMul through element-wise ops",
                    node.op_type, node.name
                )))
            }
        }
    }
}
