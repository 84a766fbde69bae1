//! `.onnx` file (with external data) → IR.
//!
//! Calls of model-local functions are expanded into their bodies, except the contrib ops whose
//! bodies mobius writes itself (those stay ops; the caller names them, [`KnownFunctions`]). Initializer data is not
//! read: inline tensors are kept as bytes, external ones become
//! [`TensorSource::External`] references resolved when the model is saved again.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use prost::Message;

use super::functions::KnownFunctions;
use super::names::check_single_assignment;
use super::order::check_order;
use super::proto::{self, attribute_type as at};
use crate::ir::{
    Attr, Attrs, DType, Dim, Graph, Initializer, Model, Node, Shape, TensorData, TensorSource,
    ValueInfo,
};
use crate::paths::file_inside;
use crate::{Error, Result};

/// The model-local functions to expand: all but the contrib-op bodies of `known`.
fn foreign_functions(
    functions: Vec<proto::FunctionProto>,
    known: &dyn KnownFunctions,
) -> Vec<proto::FunctionProto> {
    functions
        .into_iter()
        .filter(|f| !known.is_known(&f.domain, &f.name))
        .collect()
}

/// Reads `path` (and resolves external data relative to its folder). `path` itself may be a
/// link (the user named it); external data must lie inside the folder of `path` as given.
/// Calls of the functions of `known` stay ops.
pub fn load(path: &Path, known: &dyn KnownFunctions) -> Result<Model> {
    let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
    if !meta.is_file() {
        return Err(Error::Onnx {
            path: path.to_path_buf(),
            message: "is not a file; expected an .onnx model file".into(),
        });
    }
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    decode(&bytes, path, known)
}

/// Decodes model bytes; `path` locates external data files and names errors. Checks every
/// external data reference (location inside the model's folder, byte range inside the file and
/// of the tensor's size), inline data sizes and that value names are assigned once. Never
/// panics. Calls of the functions of `known` stay ops.
pub fn decode(bytes: &[u8], path: &Path, known: &dyn KnownFunctions) -> Result<Model> {
    let err = |message: String| Error::Onnx {
        path: path.to_path_buf(),
        message,
    };
    if bytes.is_empty() {
        return Err(err("the file is empty; expected an ONNX model".into()));
    }
    let m = proto::ModelProto::decode(bytes).map_err(|e| err(format!("not an ONNX model: {e}")))?;
    let g = m
        .graph
        .ok_or_else(|| err("the model has no graph".into()))?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let functions = foreign_functions(m.functions, known);
    let ctx = Ctx {
        path,
        dir,
        functions: &functions,
    };
    let opsets = check_opsets(m.opset_import).map_err(err)?;
    // Before IR 4 every initializer had to be listed as a graph input too: those entries
    // declare constants, not inputs.
    let constants: std::collections::BTreeSet<&str> = if m.ir_version < 4 {
        g.initializer.iter().map(|t| t.name.as_str()).collect()
    } else {
        Default::default()
    };
    let mut unshaped = Vec::new();
    let graph = Graph {
        name: g.name.clone(),
        inputs: g
            .input
            .iter()
            .filter(|v| !constants.contains(v.name.as_str()))
            .map(|v| ctx.value_info(v))
            .collect::<Result<_>>()?,
        outputs: g
            .output
            .iter()
            .map(|v| ctx.output_info(v, &mut unshaped))
            .collect::<Result<_>>()?,
        // Intermediate declarations are hints: one mobius cannot use (no shape, a sequence
        // type) is dropped.
        value_info: g
            .value_info
            .iter()
            .filter_map(|v| ctx.value_info(v).ok())
            .collect(),
        nodes: super::functions::expand(g.node, &functions)
            .map_err(err)?
            .into_iter()
            .map(|n| ctx.node(n))
            .collect::<Result<_>>()?,
        initializers: g
            .initializer
            .iter()
            .map(|t| ctx.initializer(t))
            .collect::<Result<_>>()?,
        unshaped,
        untyped: Vec::new(),
    };
    let graph = hoist_initializers(graph);
    check_single_assignment(&graph).map_err(err)?;
    check_order(&graph).map_err(err)?;
    if !opsets.contains_key("") && graph.nodes.iter().any(|n| n.domain.is_empty()) {
        return Err(err(
            "the model imports no opset of the default ONNX domain, but its graph uses ONNX ops \
             (add an opset_import entry with domain \"\")"
                .into(),
        ));
    }
    Ok(Model {
        graph,
        opsets,
        ir_version: m.ir_version,
        producer_name: m.producer_name,
        producer_version: m.producer_version,
    })
}

/// Moves the initializers of every subgraph (nested ones too) to the main graph, where the
/// subgraph reads them as values of its enclosing scope (ONNX's scoping makes the two the
/// same); one whose name is taken anywhere in the model is renamed, and its readers with it.
/// The optimizer, the interpreter and the writer then see every constant in one place.
fn hoist_initializers(mut graph: Graph) -> Graph {
    // How many times each name is defined in the whole model: a name defined once is kept.
    let mut defined: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for name in graph.all_names() {
        *defined.entry(name.to_string()).or_default() += 1;
    }
    let mut hoisted = Vec::new();
    for node in &mut graph.nodes {
        hoist_from_node(node, &mut defined, &mut hoisted);
    }
    graph.initializers.extend(hoisted);
    graph
}

fn hoist_from_node(
    node: &mut Node,
    defined: &mut std::collections::HashMap<String, usize>,
    hoisted: &mut Vec<Initializer>,
) {
    let names: Vec<String> = node
        .attrs
        .iter()
        .filter(|(_, a)| matches!(a, Attr::Graph(_)))
        .map(|(k, _)| k.clone())
        .collect();
    for name in names {
        let Some(Attr::Graph(mut g)) = node.attrs.get(&name).cloned() else {
            continue;
        };
        for inner in &mut g.nodes {
            hoist_from_node(inner, defined, hoisted);
        }
        let mut renames = rustc_hash::FxHashMap::default();
        for mut init in std::mem::take(&mut g.initializers) {
            if defined.get(&init.name).copied().unwrap_or(0) > 1 {
                let mut k = 1;
                let fresh = loop {
                    let candidate = format!("{}__{name}_{k}", init.name);
                    if !defined.contains_key(&candidate) {
                        break candidate;
                    }
                    k += 1;
                };
                defined.insert(fresh.clone(), 1);
                renames.insert(init.name.clone(), fresh.clone());
                init.name = fresh;
            }
            hoisted.push(init);
        }
        g.rename_free(&renames);
        node.attrs.insert(name, Attr::Graph(g));
    }
}

/// The highest opset version mobius accepts for any domain (ONNX itself is at 24; a version past
/// this is corrupt, not new).
const MAX_OPSET_VERSION: i64 = 1000;

/// The opset imports by domain (`ai.onnx` spelled as the default domain `""`); each version
/// must lie in `1..=MAX_OPSET_VERSION` and each domain be imported once.
fn check_opsets(
    imports: Vec<proto::OperatorSetIdProto>,
) -> std::result::Result<BTreeMap<String, i64>, String> {
    let mut opsets = BTreeMap::new();
    for o in imports {
        let domain = if o.domain == "ai.onnx" {
            String::new()
        } else {
            o.domain
        };
        let shown = if domain.is_empty() {
            "the default domain".to_string()
        } else {
            format!("domain `{domain}`")
        };
        if !(1..=MAX_OPSET_VERSION).contains(&o.version) {
            return Err(format!(
                "opset import of {shown} has version {}; expected 1 to {MAX_OPSET_VERSION}",
                o.version
            ));
        }
        if opsets.insert(domain, o.version).is_some() {
            return Err(format!("{shown} is imported twice (opset_import)"));
        }
    }
    Ok(opsets)
}

/// Where an initializer's bytes lie in its external data file.
#[derive(Debug, Clone, Copy)]
struct ExternalRange {
    offset: u64,
    length: u64,
}

struct Ctx<'a> {
    path: &'a Path,
    dir: &'a Path,
    /// The model-local functions to expand, in subgraphs too.
    functions: &'a [proto::FunctionProto],
}

impl Ctx<'_> {
    fn err(&self, message: String) -> Error {
        Error::Onnx {
            path: self.path.to_path_buf(),
            message,
        }
    }

    fn dtype(&self, code: i32, what: &str) -> Result<DType> {
        DType::from_onnx_code(code)
            .ok_or_else(|| self.err(format!("{what}: unsupported element type {code}")))
    }

    fn value_info(&self, v: &proto::ValueInfoProto) -> Result<ValueInfo> {
        let what = format!("value `{}`", v.name);
        let tt = v
            .r#type
            .as_ref()
            .and_then(|t| t.tensor_type.as_ref())
            .ok_or_else(|| self.err(format!("{what}: only tensor types are supported")))?;
        // No shape at all (not even a rank) cannot be written as mobius's IR for an input (a
        // shape of no dimensions would declare a scalar); an output may ([`Self::output_info`]).
        let shape = tt
            .shape
            .as_ref()
            .ok_or_else(|| {
                self.err(format!(
                    "{what} declares no shape; mobius needs a shape (rank) for every graph input"
                ))
            })?
            .dim
            .iter()
            .map(|d| match &d.value {
                Some(proto::DimensionValue::DimValue(v)) => Dim::Fixed(*v),
                Some(proto::DimensionValue::DimParam(p)) => Dim::Sym(p.clone()),
                None => Dim::Sym(String::new()),
            })
            .collect();
        Ok(ValueInfo {
            name: v.name.clone(),
            dtype: self.dtype(tt.elem_type, &what)?,
            shape: Shape(shape),
        })
    }

    /// A main-graph output: as [`Self::value_info`], but one declared with a type and no
    /// shape (ONNX leaves it to inference) is taken with an empty shape and its name pushed
    /// on `unshaped`.
    fn output_info(
        &self,
        v: &proto::ValueInfoProto,
        unshaped: &mut Vec<String>,
    ) -> Result<ValueInfo> {
        let tt = v.r#type.as_ref().and_then(|t| t.tensor_type.as_ref());
        match tt {
            Some(tt) if tt.shape.is_none() => {
                unshaped.push(v.name.clone());
                Ok(ValueInfo {
                    name: v.name.clone(),
                    dtype: self.dtype(tt.elem_type, &format!("value `{}`", v.name))?,
                    shape: Shape(Vec::new()),
                })
            }
            _ => self.value_info(v),
        }
    }

    /// A subgraph (a graph attribute): as the main graph, but an input or output may be
    /// declared without a shape, and its initializers stay with it until
    /// [`hoist_initializers`] moves them out.
    fn subgraph(&self, g: &proto::GraphProto) -> Result<Graph> {
        let (mut unshaped, mut untyped) = (Vec::new(), Vec::new());
        let mut declare = |v: &proto::ValueInfoProto| -> Result<ValueInfo> {
            let Some(t) = v.r#type.as_ref() else {
                untyped.push(v.name.clone());
                return Ok(ValueInfo::new(&v.name, DType::F32, Shape(Vec::new())));
            };
            let tt = t.tensor_type.as_ref().ok_or_else(|| {
                self.err(format!(
                    "value `{}`: only tensor types are supported",
                    v.name
                ))
            })?;
            if tt.shape.is_some() {
                return self.value_info(v);
            }
            unshaped.push(v.name.clone());
            Ok(ValueInfo {
                name: v.name.clone(),
                dtype: self.dtype(tt.elem_type, &format!("value `{}`", v.name))?,
                shape: Shape(Vec::new()),
            })
        };
        let inputs = g.input.iter().map(&mut declare).collect::<Result<_>>()?;
        let outputs = g.output.iter().map(&mut declare).collect::<Result<_>>()?;
        let graph = Graph {
            name: g.name.clone(),
            inputs,
            outputs,
            value_info: g
                .value_info
                .iter()
                .filter_map(|v| self.value_info(v).ok())
                .collect(),
            nodes: super::functions::expand(g.node.clone(), self.functions)
                .map_err(|m| self.err(m))?
                .into_iter()
                .map(|n| self.node(n))
                .collect::<Result<_>>()?,
            initializers: g
                .initializer
                .iter()
                .map(|t| self.initializer(t))
                .collect::<Result<_>>()?,
            unshaped,
            untyped,
        };
        check_single_assignment(&graph).map_err(|m| self.err(m))?;
        Ok(graph)
    }

    fn node(&self, n: proto::NodeProto) -> Result<Node> {
        let attrs = n
            .attribute
            .iter()
            .map(|a| Ok((a.name.clone(), self.attr(a, &n.name)?)))
            .collect::<Result<Attrs>>()?;
        Ok(Node {
            name: n.name,
            domain: if n.domain == "ai.onnx" {
                String::new()
            } else {
                n.domain
            },
            op_type: n.op_type,
            inputs: n.input,
            outputs: n.output,
            attrs,
        })
    }

    fn attr(&self, a: &proto::AttributeProto, node: &str) -> Result<Attr> {
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        Ok(match a.r#type {
            at::FLOAT => Attr::Float(a.f),
            at::INT => Attr::Int(a.i),
            at::STRING => Attr::String(text(&a.s)),
            at::TENSOR => {
                let t = a.t.as_ref().ok_or_else(|| {
                    self.err(format!(
                        "node `{node}`: attribute `{}` has no tensor",
                        a.name
                    ))
                })?;
                Attr::Tensor(self.tensor_data(t)?)
            }
            at::FLOATS => Attr::Floats(a.floats.clone()),
            at::INTS => Attr::Ints(a.ints.clone()),
            at::STRINGS => Attr::Strings(a.strings.iter().map(|s| text(s)).collect()),
            at::GRAPH => {
                let g = a.g.as_ref().ok_or_else(|| {
                    self.err(format!(
                        "node `{node}`: attribute `{}` has no graph",
                        a.name
                    ))
                })?;
                Attr::Graph(Box::new(self.subgraph(g).map_err(|e| match e {
                    Error::Onnx { path, message } => Error::Onnx {
                        path,
                        message: format!("node `{node}`, subgraph `{}`: {message}", a.name),
                    },
                    e => e,
                })?))
            }
            other => {
                return Err(self.err(format!(
                    "node `{node}`: attribute `{}` has unsupported type {other}",
                    a.name
                )))
            }
        })
    }

    fn shape(&self, t: &proto::TensorProto) -> Result<Vec<usize>> {
        t.dims
            .iter()
            .map(|&d| {
                usize::try_from(d)
                    .map_err(|_| self.err(format!("tensor `{}`: negative dim {d}", t.name)))
            })
            .collect()
    }

    /// Inline tensor data as bytes (raw_data or the typed repeated fields).
    fn tensor_data(&self, t: &proto::TensorProto) -> Result<TensorData> {
        let dtype = self.dtype(t.data_type, &format!("tensor `{}`", t.name))?;
        let shape = self.shape(t)?;
        let expected = dtype.bytes_for(&shape);
        let bytes = if dtype.is_4bit() {
            let numel = crate::limits::numel(&shape).unwrap_or(usize::MAX);
            let packed: Vec<u8> = if !t.raw_data.is_empty() || numel == 0 {
                t.raw_data.clone()
            } else {
                t.int32_data.iter().map(|&v| v as u8).collect()
            };
            if packed.len() != dtype.stored_bytes(numel) {
                return Err(self.err(format!(
                    "tensor `{}`: {} data bytes, but shape {shape:?} of {dtype} needs {}",
                    t.name,
                    packed.len(),
                    dtype.stored_bytes(numel)
                )));
            }
            crate::ir::unpack_4bit(&packed, numel, dtype == DType::I4)
        } else if !t.raw_data.is_empty() || expected == Some(0) {
            t.raw_data.clone()
        } else {
            match dtype {
                DType::F32 => t.float_data.iter().flat_map(|v| v.to_le_bytes()).collect(),
                DType::F64 => t.double_data.iter().flat_map(|v| v.to_le_bytes()).collect(),
                DType::I64 => t.int64_data.iter().flat_map(|v| v.to_le_bytes()).collect(),
                DType::I32 => t.int32_data.iter().flat_map(|v| v.to_le_bytes()).collect(),
                DType::F16 | DType::BF16 | DType::I16 | DType::U16 => t
                    .int32_data
                    .iter()
                    .flat_map(|&v| (v as u16).to_le_bytes())
                    .collect(),
                DType::U32 => t
                    .uint64_data
                    .iter()
                    .flat_map(|&v| (v as u32).to_le_bytes())
                    .collect(),
                DType::U64 => t.uint64_data.iter().flat_map(|v| v.to_le_bytes()).collect(),
                DType::I8 | DType::U8 | DType::Bool | DType::I4 | DType::U4 | DType::F8E4M3FN => {
                    t.int32_data.iter().map(|&v| v as u8).collect()
                }
            }
        };
        if Some(bytes.len()) != expected {
            let needed = expected.map_or("more than fits in memory".to_string(), |n| n.to_string());
            return Err(self.err(format!(
                "tensor `{}`: {} data bytes, but shape {shape:?} of {dtype} needs {needed}",
                t.name,
                bytes.len()
            )));
        }
        Ok(TensorData {
            dtype,
            shape,
            bytes,
        })
    }

    /// The external data file `location` of initializer `name`: a relative path that resolves,
    /// links followed, to a regular file inside the model's folder.
    fn external_file(&self, name: &str, location: &str) -> Result<PathBuf> {
        let what = format!("initializer `{name}`: external data location");
        file_inside(self.dir, location, &what).map_err(|e| match e {
            Error::Io { path, source } => self.err(format!(
                "{what} `{}`: cannot open {}: {source}",
                location.escape_debug(),
                path.display()
            )),
            other => other,
        })
    }

    /// Checks that `range` of `file` holds exactly the tensor's `bytes` and lies inside the
    /// file. `shape` describes the tensor for the error.
    fn check_range(
        &self,
        name: &str,
        file: &Path,
        range: ExternalRange,
        bytes: u64,
        shape: &str,
    ) -> Result<()> {
        let file_len = std::fs::metadata(file)
            .map_err(|e| Error::io(file, e))?
            .len();
        let ExternalRange { offset, length } = range;
        if length != bytes {
            return Err(self.err(format!(
                "initializer `{name}`: external data length {length} in {} does not match shape \
                 {shape}, which needs {bytes} bytes",
                file.display()
            )));
        }
        match offset.checked_add(length) {
            Some(end) if end <= file_len => Ok(()),
            _ => Err(self.err(format!(
                "initializer `{name}`: external data bytes {offset}..{offset}+{length} lie past \
                 the end of {} ({file_len} bytes)",
                file.display()
            ))),
        }
    }

    fn initializer(&self, t: &proto::TensorProto) -> Result<Initializer> {
        let dtype = self.dtype(t.data_type, &format!("initializer `{}`", t.name))?;
        let shape = self.shape(t)?;
        let source = if t.data_location == proto::DATA_LOCATION_EXTERNAL {
            let entry = |key: &str| {
                t.external_data
                    .iter()
                    .find(|e| e.key == key)
                    .map(|e| e.value.as_str())
            };
            let location = entry("location").ok_or_else(|| {
                self.err(format!(
                    "initializer `{}`: external data without location",
                    t.name
                ))
            })?;
            let number = |key: &str| -> Result<Option<u64>> {
                entry(key)
                    .map(|v| {
                        v.parse::<u64>().map_err(|_| {
                            self.err(format!(
                                "initializer `{}`: external data {key} `{}` is not a byte count",
                                t.name,
                                v.escape_debug()
                            ))
                        })
                    })
                    .transpose()
            };
            let (offset, length) = (number("offset")?, number("length")?);
            // What the file holds: 4-bit values packed two per byte.
            let bytes = crate::limits::numel(&shape)
                .and_then(|n| dtype.bytes_for(&shape).map(|_| dtype.stored_bytes(n)))
                .ok_or_else(|| {
                    self.err(format!(
                        "initializer `{}`: shape {shape:?} overflows",
                        t.name
                    ))
                })? as u64;
            let file = self.external_file(&t.name, location)?;
            let range = ExternalRange {
                offset: offset.unwrap_or(0),
                length: length.unwrap_or(bytes),
            };
            self.check_range(
                &t.name,
                &file,
                range,
                bytes,
                &format!("{shape:?} of {dtype}"),
            )?;
            TensorSource::External {
                path: file,
                offset: range.offset,
                length: range.length,
                dtype,
                shape: shape.clone(),
            }
        } else {
            TensorSource::Inline(self.tensor_data(t)?)
        };
        Ok(Initializer {
            name: t.name.clone(),
            dtype,
            shape,
            source: Some(source),
        })
    }
}
