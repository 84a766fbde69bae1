//! IR → `model.onnx` + `model.onnx.data`.
//!
//! Tensors of at least [`INLINE_LIMIT`] bytes go to the external data file, each at an aligned
//! offset (64 KiB for tensors of 64 KiB or more, 64 bytes otherwise); smaller ones stay inline.
//! Tensor data is streamed one tensor at a time, written by a background thread while the next
//! tensor is prepared ([`super::data_writer`]); the protobuf never holds weights, so it stays
//! far below protobuf's 2 GiB limit whatever the model size (checked before writing).

use std::fs::File;
use std::io::Write;
use std::path::Path;

use prost::Message;

use super::data_writer::DataSink;
use super::functions::KnownFunctions;
use super::proto::{self, attribute_type as at};
use crate::ir::{Attr, Dim, Graph, Initializer, Model, Shape, TensorData, ValueInfo};
use crate::weights::eval::Evaluator;
use crate::weights::sink::Sink;
use crate::{Error, Result};

/// File name of the ONNX model inside a package.
pub const MODEL_FILE: &str = "model.onnx";
/// File name of the external data file next to the model.
pub const DATA_FILE: &str = "model.onnx.data";
/// Tensors smaller than this many bytes are stored inline in the protobuf.
pub const INLINE_LIMIT: usize = 256;
/// Protobuf's hard limit on one message.
const PROTOBUF_LIMIT: usize = (1 << 31) - 1;

/// Where one initializer's bytes go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Inline `raw_data`.
    Inline,
    /// External data file at `offset`, `length` bytes.
    External {
        /// Byte offset in the data file.
        offset: u64,
        /// Byte length.
        length: u64,
    },
}

/// Computes the placement of every initializer, in initializer order, and the data file size.
pub fn plan_layout(graph: &Graph) -> (Vec<Placement>, u64) {
    let mut end = 0u64;
    let placements = graph
        .initializers
        .iter()
        .map(|init| {
            let len = init.byte_len();
            // Declared-only tensors (no data) always go external so the model stays loadable.
            if len < INLINE_LIMIT && init.source.is_some() {
                return Placement::Inline;
            }
            let align: u64 = if len >= 1 << 16 { 1 << 16 } else { 64 };
            let offset = end.div_ceil(align) * align;
            end = offset + len as u64;
            Placement::External {
                offset,
                length: len as u64,
            }
        })
        .collect();
    (placements, end)
}

/// What [`save`] wrote.
#[derive(Debug, Clone, Default)]
pub struct SaveReport {
    /// Bytes of tensor data written to the external data file.
    pub data_bytes: u64,
    /// Values clamped to ±65504 while converting to f16.
    pub clamped_f16: usize,
    /// Size of `model.onnx` in bytes.
    pub model_bytes: u64,
}

/// Writes `model` as `dir/model.onnx` + `dir/model.onnx.data`.
///
/// Every initializer source is checked first (existence, dtype convertibility, shape), so a
/// bad checkpoint fails before anything is written. Initializers declared without a source are
/// written as zero-filled holes (sparse) of the right size. The mapped inputs' pages are
/// unmapped as their tensors are written ([`Evaluator::unmap_when_read`]), so the process does
/// not keep the whole checkpoint mapped.
pub fn save(
    model: &Model,
    dir: &Path,
    evaluator: &mut Evaluator<'_>,
    progress: &indicatif::ProgressBar,
    known: &dyn KnownFunctions,
) -> Result<SaveReport> {
    crate::weights::check_sources(&model.graph, evaluator)?;
    let (placements, data_len) = plan_layout(&model.graph);
    let mut report = SaveReport::default();

    let data_path = dir.join(DATA_FILE);
    let needs_data = placements
        .iter()
        .any(|p| matches!(p, Placement::External { .. }));
    if needs_data {
        progress.set_length(data_len);
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&data_path)
            .map_err(|e| Error::io(&data_path, e))?;
        std::thread::scope(|scope| -> Result<()> {
            let ranges: Vec<(u64, u64)> = model
                .graph
                .initializers
                .iter()
                .zip(&placements)
                .filter_map(|(init, placement)| match (placement, &init.source) {
                    (Placement::External { offset, length }, Some(_)) => {
                        Some((*offset, offset + length))
                    }
                    _ => None,
                })
                .collect();
            let mut sink = DataSink::start(scope, file, &data_path, progress, data_len, &ranges)?;
            evaluator.unmap_when_read();
            for (init, placement) in model.graph.initializers.iter().zip(&placements) {
                let (Placement::External { offset, .. }, Some(src)) = (placement, &init.source)
                else {
                    continue;
                };
                evaluator.check_cancel()?;
                sink.skip_to(*offset)?;
                if init.dtype.is_4bit() {
                    let mut packer = NibblePacker::default();
                    let mut pack = |bytes: &[u8]| sink.write(&packer.pack(bytes));
                    report.clamped_f16 += evaluator.stream(src, init.dtype, &mut pack)?;
                    packer.finish().map_or(Ok(()), |last| sink.write(&[last]))?;
                } else {
                    report.clamped_f16 += evaluator.stream(src, init.dtype, &mut sink)?;
                }
                let written = sink.position() - offset;
                if written != init.byte_len() as u64 {
                    return Err(Error::Graph(format!(
                        "initializer `{}` produced {written} bytes, expected {}",
                        init.name,
                        init.byte_len()
                    )));
                }
                report.data_bytes += written;
                evaluator.unmap_read();
            }
            sink.finish().map(drop)
        })?;
    }
    if report.clamped_f16 > 0 {
        tracing::warn!(
            "{} weight values were outside the f16 range and were clamped to ±65504",
            report.clamped_f16
        );
    }

    let encoded = encode_model(model, &placements, evaluator, known)?;
    let len = encoded.len();
    if len > PROTOBUF_LIMIT {
        return Err(Error::Graph(format!(
            "model protobuf would be {len} bytes, above protobuf's 2 GiB limit"
        )));
    }
    let model_path = dir.join(MODEL_FILE);
    encoded
        .write_to(&model_path)
        .map_err(|e| Error::io(&model_path, e))?;
    report.model_bytes = len as u64;
    Ok(report)
}

/// The bytes of an encoded `ModelProto`, in pieces (see [`encode_model`]).
pub struct EncodedModel {
    /// The model's fields before `graph`, the `graph` key and the graph's length.
    head: Vec<u8>,
    /// The graph's fields.
    graph: Vec<u8>,
    /// The model's fields after `graph`.
    tail: Vec<u8>,
}

impl EncodedModel {
    /// Total length in bytes.
    pub fn len(&self) -> usize {
        self.head.len() + self.graph.len() + self.tail.len()
    }

    /// Whether there are no bytes (never: a model has a graph).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes, in one buffer.
    pub fn to_vec(&self) -> Vec<u8> {
        [&self.head[..], &self.graph, &self.tail].concat()
    }

    /// Writes the bytes to a new file at `path` (as [`std::fs::write`] would).
    pub fn write_to(&self, path: &Path) -> std::io::Result<()> {
        let mut file = File::create(path)?;
        for part in [&self.head, &self.graph, &self.tail] {
            file.write_all(part)?;
        }
        Ok(())
    }
}

/// The key byte of a length-delimited field (wire type 2) numbered below 16.
const fn message_key(field: u8) -> u8 {
    field << 3 | 2
}

/// The `ModelProto` of `model` with the given placements (inline tensors evaluated), encoded:
/// the bytes of `model_proto(..).encode_to_vec()`. Each node and initializer becomes its
/// message and is encoded at once, so the messages of a large graph never all exist together:
/// walking them three times (lengths, encoding, freeing), scattered over the heap, cost more
/// than making them. prost writes a message's fields in tag order and leaves out default
/// values, so messages holding disjoint runs of the fields concatenate to the whole.
pub fn encode_model(
    model: &Model,
    placements: &[Placement],
    evaluator: &mut Evaluator<'_>,
    known: &dyn KnownFunctions,
) -> Result<EncodedModel> {
    let g = &model.graph;
    // GraphProto: node = 1, name = 2, initializer = 5, then doc_string, input, output and
    // value_info (10 to 13).
    let mut graph = Vec::new();
    for node in &g.nodes {
        graph.push(message_key(1));
        encode_into(&node_proto(node), &mut graph, true);
    }
    let name = proto::GraphProto {
        name: g.name.clone(),
        ..Default::default()
    };
    encode_into(&name, &mut graph, false);
    for (init, placement) in g.initializers.iter().zip(placements) {
        graph.push(message_key(5));
        encode_into(
            &initializer_proto(init, *placement, evaluator)?,
            &mut graph,
            true,
        );
    }
    let values = proto::GraphProto {
        input: g.inputs.iter().map(value_info_proto).collect(),
        output: g.outputs.iter().map(|v| declared(g, v)).collect(),
        value_info: g.value_info.iter().map(value_info_proto).collect(),
        ..Default::default()
    };
    encode_into(&values, &mut graph, false);
    // ModelProto: ir_version = 1 to doc_string = 6, graph = 7, then opset_import = 8,
    // metadata_props = 14 and functions = 25.
    let model_fields = model_fields(model, known);
    let mut head = Vec::new();
    let before = proto::ModelProto {
        ir_version: model_fields.ir_version,
        producer_name: model_fields.producer_name,
        producer_version: model_fields.producer_version,
        ..Default::default()
    };
    encode_into(&before, &mut head, false);
    head.push(message_key(7));
    prost::encode_length_delimiter(graph.len(), &mut head).expect("a Vec grows");
    let mut tail = Vec::new();
    let after = proto::ModelProto {
        opset_import: model_fields.opset_import,
        functions: model_fields.functions,
        ..Default::default()
    };
    encode_into(&after, &mut tail, false);
    Ok(EncodedModel { head, graph, tail })
}

/// Appends `message` to `buf`, preceded by its length when `delimited`.
fn encode_into(message: &impl Message, buf: &mut Vec<u8>, delimited: bool) {
    let done = match delimited {
        true => message.encode_length_delimited(buf),
        false => message.encode(buf),
    };
    done.expect("a Vec grows as needed");
}

/// The fields of `model`'s `ModelProto` but its graph, with the functions of `known` it calls.
fn model_fields(model: &Model, known: &dyn KnownFunctions) -> proto::ModelProto {
    proto::ModelProto {
        ir_version: model.ir_version,
        opset_import: model
            .opsets
            .iter()
            .map(|(domain, version)| proto::OperatorSetIdProto {
                domain: domain.clone(),
                version: *version,
            })
            .collect(),
        producer_name: model.producer_name.clone(),
        producer_version: model.producer_version.clone(),
        functions: known.functions_for(model),
        ..Default::default()
    }
}

/// Builds the `ModelProto` for `model` with the given placements (inline tensors evaluated);
/// [`encode_model`] encodes it without holding all of it.
pub fn model_proto(
    model: &Model,
    placements: &[Placement],
    evaluator: &mut Evaluator<'_>,
    known: &dyn KnownFunctions,
) -> Result<proto::ModelProto> {
    let g = &model.graph;
    let initializer = g
        .initializers
        .iter()
        .zip(placements)
        .map(|(init, placement)| initializer_proto(init, *placement, evaluator))
        .collect::<Result<Vec<_>>>()?;
    let graph = proto::GraphProto {
        node: g.nodes.iter().map(node_proto).collect(),
        name: g.name.clone(),
        initializer,
        input: g.inputs.iter().map(value_info_proto).collect(),
        output: g.outputs.iter().map(|v| declared(g, v)).collect(),
        value_info: g.value_info.iter().map(value_info_proto).collect(),
        ..Default::default()
    };
    Ok(proto::ModelProto {
        graph: Some(graph),
        ..model_fields(model, known)
    })
}

fn initializer_proto(
    init: &Initializer,
    placement: Placement,
    evaluator: &mut Evaluator<'_>,
) -> Result<proto::TensorProto> {
    let mut t = proto::TensorProto {
        dims: init.shape.iter().map(|&d| d as i64).collect(),
        data_type: init.dtype.onnx_code(),
        name: init.name.clone(),
        ..Default::default()
    };
    match placement {
        Placement::Inline => {
            let src = init.source.as_ref().ok_or_else(|| {
                Error::Graph(format!("initializer `{}` has no data to inline", init.name))
            })?;
            let bytes = evaluator.read(src, init.dtype)?;
            t.raw_data = if init.dtype.is_4bit() {
                crate::ir::pack_4bit(&bytes)
            } else {
                bytes
            };
        }
        Placement::External { offset, length } => {
            t.data_location = proto::DATA_LOCATION_EXTERNAL;
            t.external_data = [
                ("location", DATA_FILE.to_string()),
                ("offset", offset.to_string()),
                ("length", length.to_string()),
            ]
            .into_iter()
            .map(|(k, v)| proto::StringStringEntryProto {
                key: k.to_string(),
                value: v,
            })
            .collect();
        }
    }
    Ok(t)
}

/// A small in-memory tensor as a `TensorProto` with `raw_data` (4-bit values packed two per
/// byte).
pub fn tensor_proto(name: &str, data: &TensorData) -> proto::TensorProto {
    proto::TensorProto {
        dims: data.shape.iter().map(|&d| d as i64).collect(),
        data_type: data.dtype.onnx_code(),
        name: name.to_string(),
        raw_data: if data.dtype.is_4bit() {
            crate::ir::pack_4bit(&data.bytes)
        } else {
            data.bytes.clone()
        },
        ..Default::default()
    }
}

/// Packs a stream of one-byte 4-bit values two per byte (low nibble first) across chunks of
/// any length: a chunk of odd length leaves one value waiting for the next chunk's first.
#[derive(Debug, Default)]
struct NibblePacker {
    pending: Option<u8>,
}

impl NibblePacker {
    /// The packed bytes completed by `values`.
    fn pack(&mut self, values: &[u8]) -> Vec<u8> {
        let mut rest = values;
        let mut out = Vec::with_capacity(values.len() / 2 + 1);
        if let (Some(low), Some((&high, tail))) = (self.pending, rest.split_first()) {
            out.push((low & 0x0f) | (high & 0x0f) << 4);
            self.pending = None;
            rest = tail;
        }
        let pairs = rest.len() / 2 * 2;
        out.extend(crate::ir::pack_4bit(&rest[..pairs]));
        if pairs < rest.len() {
            self.pending = Some(rest[pairs]);
        }
        out
    }

    /// The last byte (its high nibble zero) when an odd number of values was packed.
    fn finish(self) -> Option<u8> {
        self.pending.map(|low| low & 0x0f)
    }
}

fn node_proto(node: &crate::ir::Node) -> proto::NodeProto {
    proto::NodeProto {
        input: node.inputs.clone(),
        output: node.outputs.clone(),
        name: node.name.clone(),
        op_type: node.op_type.clone(),
        attribute: node
            .attrs
            .iter()
            .map(|(name, a)| attribute_proto(name, a))
            .collect(),
        domain: node.domain.clone(),
        ..Default::default()
    }
}

/// The `AttributeProto` of attribute `name` with value `attr`.
pub fn attribute_proto(name: &str, attr: &Attr) -> proto::AttributeProto {
    let mut a = proto::AttributeProto {
        name: name.to_string(),
        ..Default::default()
    };
    match attr {
        Attr::Float(v) => (a.r#type, a.f) = (at::FLOAT, *v),
        Attr::Int(v) => (a.r#type, a.i) = (at::INT, *v),
        Attr::String(v) => (a.r#type, a.s) = (at::STRING, v.as_bytes().to_vec()),
        Attr::Tensor(t) => (a.r#type, a.t) = (at::TENSOR, Some(tensor_proto("", t))),
        Attr::Floats(v) => (a.r#type, a.floats) = (at::FLOATS, v.clone()),
        Attr::Ints(v) => (a.r#type, a.ints) = (at::INTS, v.clone()),
        Attr::Strings(v) => {
            a.r#type = at::STRINGS;
            a.strings = v.iter().map(|s| s.as_bytes().to_vec()).collect();
        }
        Attr::Graph(g) => (a.r#type, a.g) = (at::GRAPH, Some(Box::new(subgraph_proto(g)))),
    }
    a
}

/// The `GraphProto` of a subgraph: its nodes (their own subgraphs nested), inputs and outputs
/// (those declared without a shape written without one), value_info, and the initializers it
/// holds inline (an imported subgraph holds none: they were moved to the main graph).
fn subgraph_proto(g: &Graph) -> proto::GraphProto {
    let declare = |v: &ValueInfo| {
        if g.untyped.contains(&v.name) {
            return proto::ValueInfoProto {
                name: v.name.clone(),
                ..Default::default()
            };
        }
        let mut p = value_info_proto(v);
        if g.unshaped.contains(&v.name) {
            if let Some(t) = p.r#type.as_mut().and_then(|t| t.tensor_type.as_mut()) {
                t.shape = None;
            }
        }
        p
    };
    proto::GraphProto {
        node: g.nodes.iter().map(node_proto).collect(),
        name: g.name.clone(),
        initializer: g
            .initializers
            .iter()
            .filter_map(|i| match &i.source {
                Some(crate::ir::TensorSource::Inline(data)) => Some(tensor_proto(&i.name, data)),
                _ => None,
            })
            .collect(),
        input: g.inputs.iter().map(declare).collect(),
        output: g.outputs.iter().map(declare).collect(),
        value_info: g.value_info.iter().map(value_info_proto).collect(),
        ..Default::default()
    }
}

/// A main-graph output as the graph declares it: without a shape where it was imported
/// without one ([`Graph::unshaped`]).
fn declared(g: &Graph, v: &ValueInfo) -> proto::ValueInfoProto {
    let mut p = value_info_proto(v);
    if g.unshaped.contains(&v.name) {
        if let Some(t) = p.r#type.as_mut().and_then(|t| t.tensor_type.as_mut()) {
            t.shape = None;
        }
    }
    p
}

fn value_info_proto(v: &ValueInfo) -> proto::ValueInfoProto {
    proto::ValueInfoProto {
        name: v.name.clone(),
        r#type: Some(proto::TypeProto {
            tensor_type: Some(proto::TypeProtoTensor {
                elem_type: v.dtype.onnx_code(),
                shape: Some(shape_proto(&v.shape)),
            }),
        }),
        ..Default::default()
    }
}

fn shape_proto(shape: &Shape) -> proto::TensorShapeProto {
    proto::TensorShapeProto {
        dim: shape
            .0
            .iter()
            .map(|d| proto::Dimension {
                value: Some(match d {
                    Dim::Fixed(v) => proto::DimensionValue::DimValue(*v),
                    Dim::Sym(s) => proto::DimensionValue::DimParam(s.clone()),
                }),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nibble_packer_carries_a_value_across_odd_chunks() {
        let values: Vec<u8> = (0..11u8).map(|v| v.wrapping_mul(7) & 0x0f).collect();
        let whole = crate::ir::pack_4bit(&values);
        for chunking in [
            vec![11],
            vec![1, 10],
            vec![3, 3, 5],
            vec![1, 1, 0, 9],
            vec![2, 4, 5],
        ] {
            let mut packer = NibblePacker::default();
            let mut out = Vec::new();
            let mut at = 0;
            for len in chunking.iter().copied() {
                out.extend(packer.pack(&values[at..at + len]));
                at += len;
            }
            out.extend(packer.finish());
            assert_eq!(out, whole, "chunks {chunking:?}");
        }
        // Sign-extended int4 bytes keep their low nibble only.
        let mut packer = NibblePacker::default();
        let mut out = packer.pack(&[(-1i8) as u8]);
        out.extend(packer.pack(&[(-8i8) as u8, 7]));
        out.extend(packer.finish());
        assert_eq!(out, vec![0x8f, 0x07]);
    }
}
