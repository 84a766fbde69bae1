//! `--features static-cache`: a KV cache of a fixed number of slots (docs/features.md), the form NPUs
//! and graph-capturing runtimes want (no shape grows from one call to the next).
//!
//! The decoder's contract becomes:
//! - inputs `input_ids`, `position_ids` (`[batch, sequence_len]`), then per layer
//!   `key_cache.{i}` and `value_cache.{i}` (`[batch, N, kv_heads·head_dim]`: 3-D, heads
//!   flattened, N = `--max-seq-len`), then `write_indices` and `nonpad_kv_seqlen` (int64
//!   `[batch]`); no `attention_mask`;
//! - outputs `logits`, then per layer `updated_key_cache.{i}` and `updated_value_cache.{i}`
//!   (`[batch, N, kv_heads·head_dim]`).
//!
//! Each layer writes its new keys and values with `TensorScatter(cache, new, write_indices;
//! axis 1)` (row `b` from slot `write_indices[b]`), and its opset-24 `Attention` reads the
//! updated caches with `nonpad_kv_seqlen`: keys at or beyond `nonpad_kv_seqlen[b]` are masked,
//! and `is_causal` lets query `s` see the keys up to slot `nonpad_kv_seqlen[b] − sequence_len + s`.
//! A call therefore feeds `nonpad_kv_seqlen = write_indices + sequence_len`; in a right-padded
//! batch the pads' keys land behind every valid query of their row, hidden by causality, and
//! the next call of that row writes from its own length, over them. Sliding-window layers get
//! a boolean mask that hides keys `window` or more slots behind the query (slots are token
//! positions, padding never sits between a row's tokens).
//!
//! The rewrite runs on the portable graph every decoder family builds (attention over the
//! `past_key_values.{i}.*` inputs); the padding-mask subgraph of `attention_mask` becomes dead
//! and is removed.

use std::collections::{BTreeSet, HashSet};

use crate::config::{ArchConfig, RopeScaling};
use crate::ir::{
    Attr, DType, Dim, Graph, Initializer, Node, Shape, TensorData, TensorSource, ValueInfo,
};
use crate::models::components::decoder_io::BATCH;
use crate::models::components::{ALIBI_BIAS, CHUNKED_MASK, INDEX_MASK};
use crate::Error;

/// The per-row start slot of the new tokens.
pub const WRITE_INDICES: &str = "write_indices";
/// The per-row number of valid cache slots after the update (opset-24 Attention's input 6).
pub const NONPAD_KV_SEQLEN: &str = "nonpad_kv_seqlen";
/// How far each new token's slot is from each cache slot, `[batch, sequence_len, N]`.
const DISTANCES: &str = "static_cache.query_key_distance";

/// The static-cache input of layer `i`'s keys (`value` false) or values.
pub fn cache_input(i: usize, value: bool) -> String {
    format!("{}_cache.{i}", if value { "value" } else { "key" })
}

/// The static-cache output of layer `i`'s keys (`value` false) or values.
pub fn cache_output(i: usize, value: bool) -> String {
    format!("updated_{}", cache_input(i, value))
}

/// Whether `graph` has the static-cache contract (its `write_indices` input).
pub fn is_static_cache(graph: &Graph) -> bool {
    graph.inputs.iter().any(|v| v.name == WRITE_INDICES)
}

/// One layer's attention node and its cache widths.
struct LayerAttention {
    node: usize,
    key_width: usize,
    value_width: usize,
}

/// Rewrites the decoder graph of `cfg` to the static-cache contract with `max_seq_len` slots
/// (see the module documentation). Errors: a graph without the decoder KV-cache inputs
/// (usage), `max_seq_len` beyond the positions the model has tables for (usage), and a graph
/// whose attention over the cache is not the builders' 3-D opset-24 `Attention`, adds an
/// ALiBi bias or attends in chunks.
pub fn static_cache(graph: &mut Graph, cfg: &ArchConfig, max_seq_len: usize) -> crate::Result<()> {
    if let Some(state) = graph.inputs.iter().find(|v| v.name.starts_with("past.")) {
        return Err(Error::Usage(format!(
            "--features static-cache applies to decoders whose every layer has a KV cache: \
             model_type `{}` carries a conv state (`{}`) between calls",
            cfg.model_type.name, state.name
        )));
    }
    let first_cache = graph
        .inputs
        .iter()
        .find(|v| v.name == "past_key_values.0.key");
    let Some(dtype) = first_cache.map(|v| v.dtype) else {
        return Err(Error::Usage(
            "--features static-cache applies to decoders with a KV cache: the graph has no \
             `past_key_values.*` inputs"
                .into(),
        ));
    };
    let positions = cfg.rope.context_length(cfg.max_position_embeddings);
    if max_seq_len == 0 || max_seq_len > positions {
        let scaled = match cfg.rope.scaling {
            RopeScaling::Dynamic { factor, .. } => {
                format!(" times the dynamic RoPE factor {factor}")
            }
            _ => String::new(),
        };
        return Err(Error::Usage(format!(
            "--max-seq-len {max_seq_len} must be from 1 to {positions}, the context length of \
             config.json (max_position_embeddings ({}){scaled}): positions beyond it have no \
             rotary or position table",
            cfg.max_position_embeddings
        )));
    }
    let layers: Vec<LayerAttention> = (0..cfg.num_hidden_layers)
        .map(|i| layer_attention(graph, i))
        .collect::<crate::Result<_>>()?;

    let windows: BTreeSet<usize> = cfg
        .layer_windows
        .iter()
        .flatten()
        .copied()
        .filter(|&w| w < max_seq_len)
        .collect();
    let mut front = Vec::new();
    if !windows.is_empty() {
        front.extend(query_distances(graph, max_seq_len));
        for &w in &windows {
            front.extend(window_mask(graph, w));
        }
    }
    // Layers in graph order, so that each layer's node index shifts by what was inserted
    // before it.
    let mut order: Vec<usize> = (0..layers.len()).collect();
    order.sort_by_key(|&i| layers[i].node);
    for (inserted, &i) in order.iter().enumerate() {
        let at = layers[i].node + 2 * inserted;
        let mask = match cfg.layer_windows.get(i).copied().flatten() {
            Some(w) if windows.contains(&w) => window_mask_name(w),
            _ => String::new(),
        };
        let node = &mut graph.nodes[at];
        let (k, v) = (node.inputs[1].clone(), node.inputs[2].clone());
        node.inputs = vec![
            node.inputs[0].clone(),
            cache_output(i, false),
            cache_output(i, true),
            mask,
            String::new(),
            String::new(),
            NONPAD_KV_SEQLEN.into(),
        ];
        node.outputs.truncate(1);
        let scatter = |value: bool, new: &str| Node {
            name: format!(
                "static_cache/TensorScatter_{}.{i}",
                if value { "value" } else { "key" }
            ),
            domain: String::new(),
            op_type: "TensorScatter".into(),
            inputs: vec![cache_input(i, value), new.to_string(), WRITE_INDICES.into()],
            outputs: vec![cache_output(i, value)],
            attrs: [("axis".to_string(), Attr::Int(1))].into(),
        };
        graph
            .nodes
            .splice(at..at, [scatter(false, &k), scatter(true, &v)]);
    }
    graph.nodes.splice(0..0, front);

    let slot_dims = |width: usize| Shape(vec![Dim::sym(BATCH), max_seq_len.into(), width.into()]);
    let row = || Shape(vec![Dim::sym(BATCH)]);
    let keep: Vec<ValueInfo> = graph
        .inputs
        .iter()
        .filter(|v| v.name == "input_ids" || v.name == "position_ids")
        .cloned()
        .collect();
    graph.inputs = keep;
    for (i, layer) in layers.iter().enumerate() {
        graph.inputs.push(ValueInfo::new(
            &cache_input(i, false),
            dtype,
            slot_dims(layer.key_width),
        ));
        graph.inputs.push(ValueInfo::new(
            &cache_input(i, true),
            dtype,
            slot_dims(layer.value_width),
        ));
    }
    graph
        .inputs
        .push(ValueInfo::new(WRITE_INDICES, DType::I64, row()));
    graph
        .inputs
        .push(ValueInfo::new(NONPAD_KV_SEQLEN, DType::I64, row()));
    graph.outputs.retain(|o| o.name == "logits");
    for (i, layer) in layers.iter().enumerate() {
        graph.outputs.push(ValueInfo::new(
            &cache_output(i, false),
            dtype,
            slot_dims(layer.key_width),
        ));
        graph.outputs.push(ValueInfo::new(
            &cache_output(i, true),
            dtype,
            slot_dims(layer.value_width),
        ));
    }
    remove_dead(graph);
    graph.validate()
}

/// Layer `i`'s attention: the opset-24 `Attention` (3-D, head counts as attributes) reading
/// `past_key_values.{i}.key/value` as its inputs 4 and 5 and writing `present.{i}.key/value` as
/// its outputs 1 and 2, which no other node reads; the cache widths from the declared past
/// shapes `[batch, kv_heads, past, head_dim]`.
fn layer_attention(graph: &Graph, i: usize) -> crate::Result<LayerAttention> {
    let past = [
        format!("past_key_values.{i}.key"),
        format!("past_key_values.{i}.value"),
    ];
    let present = [format!("present.{i}.key"), format!("present.{i}.value")];
    let unsupported = |what: &str| {
        Error::Graph(format!(
            "static-cache: layer {i} {what}; the static cache rewrites the builders' opset-24 \
             Attention over `{}`/`{}`",
            past[0], past[1]
        ))
    };
    let width = |name: &str| -> crate::Result<usize> {
        let v = graph
            .inputs
            .iter()
            .find(|v| v.name == name)
            .ok_or_else(|| unsupported(&format!("has no input `{name}`")))?;
        match v.shape.0.as_slice() {
            [_, Dim::Fixed(heads), _, Dim::Fixed(dim)] if *heads > 0 && *dim > 0 => {
                Ok((heads * dim) as usize)
            }
            _ => Err(unsupported(&format!(
                "declares `{name}` as {}, not [batch, kv_heads, past, head_dim]",
                v.shape
            ))),
        }
    };
    let (key_width, value_width) = (width(&past[0])?, width(&past[1])?);
    let readers: Vec<usize> = (0..graph.nodes.len())
        .filter(|&n| {
            let node = &graph.nodes[n];
            node.inputs
                .iter()
                .any(|v| past.contains(v) || present.contains(v))
        })
        .collect();
    let node = match readers.as_slice() {
        [n] => *n,
        _ => return Err(unsupported("reads its cache in more than one node")),
    };
    let n = &graph.nodes[node];
    let three_d = n.attrs.contains_key("q_num_heads") && n.attrs.contains_key("kv_num_heads");
    let wired = n.inputs.get(4) == Some(&past[0])
        && n.inputs.get(5) == Some(&past[1])
        && n.outputs.get(1) == Some(&present[0])
        && n.outputs.get(2) == Some(&present[1])
        && n.inputs.len() == 6;
    if n.op_type != "Attention" || !n.domain.is_empty() || !three_d || !wired {
        return Err(unsupported(&format!(
            "reads its cache in {} node `{}`",
            n.op_type, n.name
        )));
    }
    if n.inputs.get(3).is_some_and(|m| m.starts_with(ALIBI_BIAS)) {
        return Err(unsupported(
            "adds an ALiBi bias to its scores (built from `attention_mask`'s positions, which \
             the static cache's slot mask does not carry)",
        ));
    }
    if n.inputs.get(3).is_some_and(|m| m.starts_with(INDEX_MASK)) {
        return Err(unsupported(
            "attends to the keys a learned indexer selects (its index-key cache is no KV cache \
             the static cache rewrites)",
        ));
    }
    if n.inputs.get(3).is_some_and(|m| m.starts_with(CHUNKED_MASK)) {
        return Err(unsupported(
            "attends in chunks (its mask counts `attention_mask`'s valid tokens, which the \
             static cache's slot mask does not carry)",
        ));
    }
    Ok(LayerAttention {
        node,
        key_width,
        value_width,
    })
}

/// An int64 initializer `name` of `shape` holding `values`, added to `graph` once.
fn int_constant(graph: &mut Graph, name: &str, shape: Vec<usize>, values: &[i64]) -> String {
    if !graph.initializers.iter().any(|i| i.name == name) {
        graph.initializers.push(Initializer {
            name: name.into(),
            dtype: DType::I64,
            shape: shape.clone(),
            source: Some(TensorSource::Inline(TensorData::from_i64(shape, values))),
        });
    }
    name.into()
}

/// A standard-domain node `static_cache/{output}` computing `output`.
fn op(op_type: &str, inputs: &[&str], attrs: Vec<(&str, Attr)>, output: &str) -> Node {
    Node {
        name: format!("static_cache/{output}"),
        domain: String::new(),
        op_type: op_type.into(),
        inputs: inputs.iter().map(|s| s.to_string()).collect(),
        outputs: vec![output.into()],
        attrs: attrs.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
    }
}

/// The nodes computing [`DISTANCES`]: `write_indices[b] + s − slot` for every new token `s`
/// and cache slot (a CumSum counts the tokens: no `Range`, which some EPs lack).
fn query_distances(graph: &mut Graph, max_seq_len: usize) -> Vec<Node> {
    let one = int_constant(graph, "static_cache.one", vec![1], &[1]);
    let axis0 = int_constant(graph, "static_cache.axis0", vec![], &[0]);
    let axes1 = int_constant(graph, "static_cache.axes1", vec![1], &[1]);
    let axes2 = int_constant(graph, "static_cache.axes2", vec![1], &[2]);
    let slots: Vec<i64> = (0..max_seq_len as i64).collect();
    let slots = int_constant(graph, "static_cache.slots", vec![max_seq_len], &slots);
    let v = |name: &str| format!("static_cache.{name}");
    vec![
        op(
            "Shape",
            &["input_ids"],
            vec![("end", Attr::Int(2)), ("start", Attr::Int(1))],
            &v("sequence_len"),
        ),
        op(
            "Expand",
            &[&one, &v("sequence_len")],
            vec![],
            &v("token_ones"),
        ),
        op(
            "CumSum",
            &[&v("token_ones"), &axis0],
            vec![],
            &v("token_counts"),
        ),
        op(
            "Sub",
            &[&v("token_counts"), &one],
            vec![],
            &v("token_offsets"),
        ),
        op(
            "Unsqueeze",
            &[WRITE_INDICES, &axes1],
            vec![],
            &v("row_starts"),
        ),
        op(
            "Add",
            &[&v("row_starts"), &v("token_offsets")],
            vec![],
            &v("query_slots"),
        ),
        op(
            "Unsqueeze",
            &[&v("query_slots"), &axes2],
            vec![],
            &v("query_slot_column"),
        ),
        op("Sub", &[&v("query_slot_column"), &slots], vec![], DISTANCES),
    ]
}

/// The name of the boolean `[batch, 1, sequence_len, N]` mask of window `window`.
fn window_mask_name(window: usize) -> String {
    format!("static_cache.window_mask_{window}")
}

/// The nodes of [`window_mask_name`]: keys less than `window` slots behind the query (the
/// query's own slot included; causality hides the keys ahead of it).
fn window_mask(graph: &mut Graph, window: usize) -> Vec<Node> {
    let limit = int_constant(
        graph,
        &format!("static_cache.window_{window}"),
        vec![],
        &[window as i64],
    );
    let axes1 = int_constant(graph, "static_cache.axes1", vec![1], &[1]);
    let inside = format!("static_cache.inside_window_{window}");
    vec![
        op("Less", &[DISTANCES, &limit], vec![], &inside),
        op(
            "Unsqueeze",
            &[&inside, &axes1],
            vec![],
            &window_mask_name(window),
        ),
    ]
}

/// Removes the nodes no graph output depends on (the padding masks of `attention_mask`).
fn remove_dead(graph: &mut Graph) {
    let mut live: HashSet<String> = graph.outputs.iter().map(|o| o.name.clone()).collect();
    let mut keep = vec![false; graph.nodes.len()];
    for (n, node) in graph.nodes.iter().enumerate().rev() {
        if node.outputs.iter().any(|o| live.contains(o)) {
            keep[n] = true;
            live.extend(node.inputs.iter().filter(|i| !i.is_empty()).cloned());
        }
    }
    let mut flags = keep.into_iter();
    graph
        .nodes
        .retain(|_| flags.next().expect("one flag per node"));
}
