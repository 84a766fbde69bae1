//! `genai_config.json` for onnxruntime-genai.

use serde_json::{json, Value};

use crate::config::ArchConfig;
use crate::ep::{genai_provider_options, genai_search_max_length, EpCapabilities};
use crate::ir::{Dim, Graph};
use crate::models::lfm2::Lfm2;
use crate::models::lfm2_moe::Lfm2Moe;

/// Whether `graph` carries an SSM state (a `past.{i}.ssm` input: Mamba2 layers). No
/// onnxruntime-genai 0.18 model type has one (its hybrid caches hold KV and conv states only),
/// so such a package gets no genai_config.json, whatever its model type.
pub fn carries_ssm_state(graph: &Graph) -> bool {
    graph
        .inputs
        .iter()
        .any(|i| i.name.starts_with("past.") && i.name.ends_with(".ssm"))
}

/// The genai_config.json document for a decoder package whose graph is `graph`, run by
/// onnxruntime-genai as `genai_type` (its model type's entry in the family registry).
///
/// Decoder inputs are read from the graph, so a graph without `position_ids` lists none. A
/// hybrid graph (with conv-state inputs `past.{i}.conv`) also names its conv states
/// (`past_conv_names`, `present_conv_names`), and one with Gated DeltaNet layers their
/// recurrent states (`past_recurrent_names`, `present_recurrent_names`: onnxruntime-genai
/// 0.18's `qwen3_5_text` / `qwen3_5_moe_text`); an LFM2 decoder gives `layer_types` (`conv` or
/// `full_attention` per layer) and `conv_cache_size` (`conv_L_cache − 1`), as
/// onnxruntime-genai 0.18 reads them for `lfm2` (and an LFM2-MoE decoder, for `lfm2_moe`).
/// `context_length` is `max_position_embeddings` (the RoPE tables hold no more positions), or
/// for dynamic NTK RoPE, whose tables the graph computes per pass, ⌈factor ×
/// max_position_embeddings⌉ ([`crate::config::Rope::context_length`]).
pub fn genai_config(
    cfg: &ArchConfig,
    genai_type: &str,
    ep: &EpCapabilities,
    graph: &Graph,
    model_file: &str,
) -> Value {
    let mut inputs = serde_json::Map::new();
    for input in graph
        .inputs
        .iter()
        .filter(|i| !i.name.starts_with("past_key_values.") && state_layer(&i.name).is_none())
    {
        inputs.insert(input.name.clone(), Value::String(input.name.clone()));
    }
    inputs.insert("past_key_names".into(), "past_key_values.%d.key".into());
    inputs.insert("past_value_names".into(), "past_key_values.%d.value".into());
    // A shared past/present buffer suits GroupQueryAttention only: every present output must
    // be one of its outputs. Any other attention left in the graph (a standard Attention a
    // sliding-window layer GQA could not take, or attention spelled out in standard ops, e.g.
    // with sinks and no RoPE) concatenates its cache. The EP must allow it too
    // (`supports_past_present_share_buffer`).
    let gqa_outputs: std::collections::HashSet<&str> = graph
        .nodes
        .iter()
        .filter(|n| n.domain == "com.microsoft" && n.op_type == "GroupQueryAttention")
        .flat_map(|n| n.outputs.iter().map(String::as_str))
        .collect();
    let mut presents = graph
        .outputs
        .iter()
        .filter(|o| o.name.starts_with("present."))
        .peekable();
    let share_buffer = ep.supports_past_present_share_buffer
        && presents.peek().is_some()
        && presents.all(|o| gqa_outputs.contains(o.name.as_str()));
    let context_length = cfg.rope.context_length(cfg.max_position_embeddings);
    // The layers with a KV cache of their own: every layer, but for the last ones of a model
    // whose final layers borrow an earlier layer's cache (Gemma 4's KV sharing); a hybrid
    // model's conv layers count as onnxruntime-genai lays out its cache by `layer_types`.
    let cache_layers = graph
        .inputs
        .iter()
        .filter(|i| i.name.starts_with("past_key_values.") && i.name.ends_with(".key"))
        .count();
    let hybrid = graph.inputs.iter().any(|i| state_layer(&i.name).is_some());
    let layers = match hybrid || cache_layers == 0 {
        true => cfg.num_hidden_layers,
        false => cache_layers.min(cfg.num_hidden_layers),
    };
    let mut model = json!({
        "type": genai_type,
        "vocab_size": logits_width(graph).unwrap_or(cfg.vocab_size),
        "context_length": context_length,
        "decoder": {
            "session_options": {"log_id": "onnxruntime-genai", "provider_options": genai_provider_options(ep)},
            "filename": model_file,
            "head_size": cfg.head_dim,
            "hidden_size": cfg.hidden_size,
            "num_attention_heads": cfg.num_attention_heads,
            "num_hidden_layers": layers,
            "num_key_value_heads": cfg.num_key_value_heads,
            "inputs": inputs,
            "outputs": {
                "logits": "logits",
                "present_key_names": "present.%d.key",
                "present_value_names": "present.%d.value",
            },
        },
    });
    for kind in ["conv", "recurrent"] {
        if graph
            .inputs
            .iter()
            .any(|i| state_layer(&i.name) == Some(kind))
        {
            let decoder = &mut model["decoder"];
            decoder["inputs"][format!("past_{kind}_names")] = format!("past.%d.{kind}").into();
            decoder["outputs"][format!("present_{kind}_names")] =
                format!("present.%d.{kind}").into();
        }
    }
    // onnxruntime-genai's lfm2 cache is laid out by these two, conv layers or not.
    let lfm2 = cfg.knobs::<Lfm2>();
    if let Some(lfm2) = lfm2.or_else(|| cfg.knobs::<Lfm2Moe>().map(|moe| &moe.lfm2)) {
        let types: Vec<&str> = lfm2
            .conv_layers
            .iter()
            .map(|&conv| if conv { "conv" } else { "full_attention" })
            .collect();
        model["decoder"]["layer_types"] = types.into();
        model["decoder"]["conv_cache_size"] = (lfm2.conv.kernel - 1).into();
    }
    if let Some(bos) = cfg.bos_token_id {
        model["bos_token_id"] = bos.into();
    }
    match cfg.eos_token_ids.as_slice() {
        [] => {}
        [one] => model["eos_token_id"] = (*one).into(),
        many => model["eos_token_id"] = many.into(),
    }
    if let Some(pad) = cfg.pad_token_id.or(cfg.eos_token_ids.first().copied()) {
        model["pad_token_id"] = pad.into();
    }
    json!({
        "model": model,
        "search": {
            "diversity_penalty": 0.0,
            "do_sample": false,
            "early_stopping": true,
            "length_penalty": 1.0,
            "max_length": genai_search_max_length(ep, context_length, share_buffer),
            "min_length": 0,
            "no_repeat_ngram_size": 0,
            "num_beams": 1,
            "num_return_sequences": 1,
            "past_present_share_buffer": share_buffer,
            "repetition_penalty": 1.0,
            "temperature": 1.0,
            "top_k": 1,
            "top_p": 1.0,
        },
    })
}

/// The kind of a carried-state input `past.{i}.conv` or `past.{i}.recurrent`: `conv` or
/// `recurrent`.
fn state_layer(name: &str) -> Option<&str> {
    let (layer, kind) = name.strip_prefix("past.")?.split_once('.')?;
    layer.parse::<usize>().ok()?;
    ["conv", "recurrent"].into_iter().find(|k| *k == kind)
}

/// The last dimension of the graph output `logits` when fixed: the width onnxruntime-genai
/// samples from (narrower than the vocabulary where the LM head is pruned).
fn logits_width(graph: &Graph) -> Option<usize> {
    let logits = graph.outputs.iter().find(|o| o.name == "logits")?;
    match logits.shape.0.last()? {
        Dim::Fixed(n) => usize::try_from(*n).ok(),
        Dim::Sym(_) => None,
    }
}

/// Serialises with a 4-space indent, as the peer writes it.
pub fn to_pretty_json(value: &Value) -> String {
    let mut out = Vec::new();
    let fmt = serde_json::ser::PrettyFormatter::with_indent(b"    ");
    let mut ser = serde_json::Serializer::with_formatter(&mut out, fmt);
    serde::Serialize::serialize(value, &mut ser).expect("a JSON value always serialises");
    String::from_utf8(out).expect("serde_json writes UTF-8")
}
