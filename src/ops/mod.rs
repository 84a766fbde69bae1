//! The op registry: what each op mobius knows *is*, in one place. An op (or a small group
//! that shares code, such as the elementwise binaries) is one module here that declares, in
//! its `OPS` table, one [`OpDef`] per op: its attribute schema (the names of its attributes,
//! in the order the e-graph holds them), its type inference ([`infer`]), the facts the EP cost
//! model weighs ([`cost`]), the opset it first appeared in, and its reference evaluator (the
//! interpreter's kernel, written in the same module). [`FAMILIES`] collects the modules; the
//! optimizer (`opt::lang`, `opt::analysis`, `opt::cost`, `opt::opset`) and the interpreter
//! (`interp::eval_node`) look ops up here and nowhere else.
//!
//! The registry sits below both: it depends on the IR, the EP capability table and the
//! values it describes (the type lattice in [`types`], attribute values and literals in
//! [`value`], concrete tensors in [`tensor`]), never on the optimizer or the interpreter.
//!
//! Adding an op: write its evaluator, inference and `OpDef` in the module of its family (or a
//! new module listed in [`FAMILIES`]); an entry it lacks (an op the interpreter does not
//! evaluate, one whose attributes the e-graph keeps opaque) says why in [`OpDef::lacks`].

pub mod arg;
pub mod attention;
pub mod bitcast;
pub mod channel_norm;
pub mod control;
pub mod conv;
pub mod cost;
pub mod deform;
pub mod detect;
pub mod einsum;
pub mod elementwise;
pub mod image;
pub mod infer;
pub mod linalg;
pub mod loss;
pub mod math;
pub mod matmul;
pub mod ml;
pub mod moe;
pub mod norm;
pub mod qlinear;
pub mod quant;
pub mod recurrent;
pub mod reduce;
pub mod relayout;
pub mod resize;
pub mod rnn;
pub mod rope;
pub mod sample;
pub mod shape;
pub mod spectral;
pub mod tensor;
pub mod text;
pub mod topk;
pub mod training;
pub mod types;
pub mod unique;
pub mod value;

use std::collections::HashMap;
use std::sync::OnceLock;

use crate::ir::{Attr, Attrs, Node};
use crate::limits::InterpLimits;
use crate::{Error, Result};
use cost::Cost;
use infer::InferFn;
pub use tensor::{Tensor, Values};

/// The domain of onnxruntime's contrib ops.
pub const CONTRIB_DOMAIN: &str = "com.microsoft";

/// The domain of mobius' own weight-relayout ops.
pub const MOBIUS_DOMAIN: &str = "ai.mobius";

/// How an op is evaluated: the node's outputs, from its call.
pub type OpEval = fn(&OpCall<'_>) -> Result<Vec<Tensor>>;

/// One op: everything the optimizer and the interpreter know of it.
#[derive(Debug, Clone, Copy)]
pub struct OpDef {
    /// The op's domain: `""` for ONNX's default domain (also reached as `ai.onnx`),
    /// [`CONTRIB_DOMAIN`] or [`MOBIUS_DOMAIN`].
    pub domain: &'static str,
    /// The op type.
    pub op: &'static str,
    /// Its attribute names, sorted: an e-node holds one child per name after its inputs.
    /// `None`: undeclared (the e-node keeps the names the node carries).
    pub attrs: Option<&'static [&'static str]>,
    /// Its type inference (`None`: its outputs are of unknown type).
    pub infer: Option<InferFn>,
    /// What the EP cost model weighs.
    pub cost: Cost,
    /// Its reference evaluator (`None`: the interpreter reports the op as not implemented).
    pub eval: Option<OpEval>,
    /// The default-domain opset it first appeared in, for a standard op that rules may
    /// introduce into a graph of an older opset (the saved model must then declare it).
    pub since: Option<i64>,
    /// Why an entry above is `None` (empty when none is).
    pub lacks: &'static str,
}

impl OpDef {
    /// An op of `domain` with the attributes `attrs` and nothing else yet.
    const fn new(domain: &'static str, op: &'static str, attrs: &'static [&'static str]) -> Self {
        OpDef {
            domain,
            op,
            attrs: Some(attrs),
            infer: None,
            cost: Cost::KERNEL,
            eval: None,
            since: None,
            lacks: "",
        }
    }

    /// An op of ONNX's default domain with the attributes `attrs`.
    pub const fn onnx(op: &'static str, attrs: &'static [&'static str]) -> Self {
        Self::new("", op, attrs)
    }

    /// An op of onnxruntime's contrib domain with the attributes `attrs`.
    pub const fn ms(op: &'static str, attrs: &'static [&'static str]) -> Self {
        Self::new(CONTRIB_DOMAIN, op, attrs)
    }

    /// An op of mobius' own domain with the attributes `attrs`.
    pub const fn mobius(op: &'static str, attrs: &'static [&'static str]) -> Self {
        Self::new(MOBIUS_DOMAIN, op, attrs)
    }

    /// This op with its type inference.
    pub const fn infer(self, infer: InferFn) -> Self {
        OpDef {
            infer: Some(infer),
            ..self
        }
    }

    /// This op with its evaluator.
    pub const fn eval(self, eval: OpEval) -> Self {
        OpDef {
            eval: Some(eval),
            ..self
        }
    }

    /// This op with its cost facts.
    pub const fn cost(self, cost: Cost) -> Self {
        OpDef { cost, ..self }
    }

    /// This op, first in default-domain opset `opset`.
    pub const fn since(self, opset: i64) -> Self {
        OpDef {
            since: Some(opset),
            ..self
        }
    }

    /// This op with undeclared attributes.
    pub const fn opaque(self) -> Self {
        OpDef {
            attrs: None,
            ..self
        }
    }

    /// This op, saying why it lacks an entry.
    pub const fn lacks(self, why: &'static str) -> Self {
        OpDef { lacks: why, ..self }
    }

    /// Its key: `OpType`, or `domain::OpType` outside the default domain ([`op_key`]).
    pub fn key(&self) -> String {
        op_key(self.domain, self.op)
    }
}

/// The registry: one table per op module.
pub const FAMILIES: [&[OpDef]; 33] = [
    elementwise::OPS,
    control::OPS,
    channel_norm::OPS,
    resize::OPS,
    sample::OPS,
    detect::OPS,
    bitcast::OPS,
    spectral::OPS,
    qlinear::OPS,
    einsum::OPS,
    unique::OPS,
    image::OPS,
    text::OPS,
    deform::OPS,
    conv::OPS,
    math::OPS,
    arg::OPS,
    loss::OPS,
    matmul::OPS,
    linalg::OPS,
    reduce::OPS,
    shape::OPS,
    norm::OPS,
    rope::OPS,
    attention::OPS,
    quant::OPS,
    topk::OPS,
    moe::OPS,
    recurrent::OPS,
    rnn::OPS,
    ml::OPS,
    training::OPS,
    relayout::OPS,
];

/// Every registered op, in registry order.
pub fn all() -> impl Iterator<Item = &'static OpDef> {
    FAMILIES.iter().flat_map(|f| f.iter())
}

/// The registered op of `domain` (`""` or `ai.onnx` for the default domain) and `op`.
pub fn find_in(domain: &str, op: &str) -> Option<&'static OpDef> {
    static BY_NAME: OnceLock<HashMap<(&'static str, &'static str), &'static OpDef>> =
        OnceLock::new();
    let by_name = BY_NAME.get_or_init(|| all().map(|def| ((def.domain, def.op), def)).collect());
    let domain = if domain == "ai.onnx" { "" } else { domain };
    by_name.get(&(domain, op)).copied()
}

/// The registered op of `key` (`OpType` or `domain::OpType`, as [`op_key`] writes it).
pub fn find(key: &str) -> Option<&'static OpDef> {
    match key.split_once("::") {
        Some((domain, op)) => find_in(domain, op),
        None => find_in("", key),
    }
}

/// The op key used in schemas and in the e-graph: `OpType` or `domain::OpType`.
pub fn op_key(domain: &str, op_type: &str) -> String {
    if domain.is_empty() || domain == "ai.onnx" {
        op_type.to_string()
    } else {
        format!("{domain}::{op_type}")
    }
}

/// The attribute names of a known op, in schema order.
pub fn schema(key: &str) -> Option<&'static [&'static str]> {
    find(key).and_then(|def| def.attrs)
}

/// What an op's evaluator receives: the node's attributes and its inputs (`None` for
/// an absent optional input).
#[derive(Debug)]
pub struct OpCall<'a> {
    /// The node being evaluated.
    pub node: &'a Node,
    /// Its inputs, positionally.
    pub inputs: Vec<Option<&'a Tensor>>,
    /// The run's budgets: an op checks every output shape it computes with [`OpCall::alloc`]
    /// before allocating it.
    pub limits: &'a InterpLimits,
    /// Where a control-flow op runs its subgraphs (`None` outside a graph run: such an op then
    /// fails).
    pub scope: Option<&'a dyn control::Scope>,
}

impl<'a> OpCall<'a> {
    /// Input `i`, which must be present.
    pub fn input(&self, i: usize) -> Result<&'a Tensor> {
        self.inputs
            .get(i)
            .copied()
            .flatten()
            .ok_or_else(|| Error::Graph(format!("{}: input {i} is required", self.tag())))
    }

    /// Input `i`, if present.
    pub fn optional(&self, i: usize) -> Option<&'a Tensor> {
        self.inputs.get(i).copied().flatten()
    }

    /// The attributes.
    pub fn attrs(&self) -> &'a Attrs {
        &self.node.attrs
    }

    /// Integer attribute `name`, or `default`.
    pub fn int(&self, name: &str, default: i64) -> i64 {
        match self.node.attrs.get(name) {
            Some(Attr::Int(v)) => *v,
            _ => default,
        }
    }

    /// Float attribute `name`, or `default`.
    pub fn float(&self, name: &str, default: f32) -> f32 {
        match self.node.attrs.get(name) {
            Some(Attr::Float(v)) => *v,
            _ => default,
        }
    }

    /// Integer-list attribute `name`, if set.
    pub fn ints(&self, name: &str) -> Option<&'a [i64]> {
        match self.node.attrs.get(name) {
            Some(Attr::Ints(v)) => Some(v),
            _ => None,
        }
    }

    /// String attribute `name`, if set.
    pub fn string(&self, name: &str) -> Option<&'a str> {
        match self.node.attrs.get(name) {
            Some(Attr::String(v)) => Some(v),
            _ => None,
        }
    }

    /// The element count of an output of shape `shape`, checked against the per-tensor budget
    /// (the error names this node). Call it before allocating the output.
    pub fn alloc(&self, shape: &[usize]) -> Result<usize> {
        self.limits
            .elements(&format!("{} output", self.tag()), shape)
    }

    /// An error about this node.
    pub fn error(&self, message: impl std::fmt::Display) -> Error {
        Error::Graph(format!("{}: {message}", self.tag()))
    }

    /// How errors name this node: its op and name, or for an unnamed node the value it writes.
    pub fn tag(&self) -> String {
        let node = self.node;
        match (node.name.is_empty(), node.outputs.first()) {
            (true, Some(out)) if !out.is_empty() => {
                format!("{} node writing `{out}`", node.op_type)
            }
            (true, _) => format!("{} node (unnamed)", node.op_type),
            (false, _) => format!("{} `{}`", node.op_type, node.name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_op_is_registered_once_with_sorted_attributes() {
        let mut seen = std::collections::HashSet::new();
        for def in all() {
            assert!(seen.insert(def.key()), "{} is registered twice", def.key());
            if let Some(attrs) = def.attrs {
                assert!(
                    attrs.windows(2).all(|w| w[0] < w[1]),
                    "{}: attributes must be sorted",
                    def.key()
                );
            }
        }
        assert_eq!(
            schema("RMSNormalization"),
            Some(&["axis", "epsilon", "stash_type"][..])
        );
        assert_eq!(schema("com.microsoft::FastGelu"), Some(&[][..]));
        assert_eq!(schema("NoSuchOp"), None);
        assert_eq!(
            find_in("ai.onnx", "Add").map(OpDef::key),
            Some("Add".into())
        );
    }

    #[test]
    fn every_op_has_all_its_entries_or_says_why_not() {
        for def in all() {
            let missing: Vec<&str> = [
                ("schema", def.attrs.is_none()),
                ("inference", def.infer.is_none()),
                ("evaluator", def.eval.is_none()),
            ]
            .iter()
            .filter(|(_, gone)| *gone)
            .map(|(name, _)| *name)
            .collect();
            assert_eq!(
                missing.is_empty(),
                def.lacks.is_empty(),
                "{}: lacks {missing:?}, says {:?}",
                def.key(),
                def.lacks
            );
            for name in &missing {
                assert!(
                    def.lacks.contains(name),
                    "{}: lacks its {name} but does not say why ({:?})",
                    def.key(),
                    def.lacks
                );
            }
        }
    }

    /// The registered op keys (`Op`, `domain::Op`).
    fn keys() -> std::collections::HashSet<String> {
        all().map(OpDef::key).collect()
    }

    /// The `.rs` files under `dir`, recursively.
    fn sources(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
        let mut files = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                files.extend(sources(&path));
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
        files
    }

    /// `text` without comment lines and without what follows its first test module.
    fn code(text: &str) -> String {
        let mut out = String::new();
        let mut lines = text.lines().peekable();
        while let Some(line) = lines.next() {
            let trimmed = line.trim();
            if trimmed == "#[cfg(test)]"
                && lines.peek().is_some_and(|l| l.trim().starts_with("mod "))
            {
                break;
            }
            if !trimmed.starts_with("//") {
                out.push_str(line);
                out.push('\n');
            }
        }
        out
    }

    /// The string literals of `text`.
    fn literals(text: &str) -> Vec<&str> {
        text.split('"').skip(1).step_by(2).collect()
    }

    /// The text from `from` (just after an opening delimiter) to its closing one.
    fn balanced(text: &str, from: usize) -> &str {
        let mut depth = 1;
        for (i, c) in text[from..].char_indices() {
            match c {
                '{' | '[' | '(' => depth += 1,
                '}' | ']' | ')' => depth -= 1,
                _ => {}
            }
            if depth == 0 {
                return &text[from..from + i];
            }
        }
        &text[from..]
    }

    /// Tables keyed by op name in `code`: a `const` or `static` whose entries open with a
    /// registered op's key (`("Add", …)`), and a `match` whose arms name `many` registered ops
    /// or more (an op dispatch, as type inference and the cost model were).
    fn op_tables(code: &str, keys: &std::collections::HashSet<String>, many: usize) -> Vec<String> {
        let mut found = Vec::new();
        for (at, _) in code
            .match_indices("const ")
            .chain(code.match_indices("static "))
        {
            let Some(eq) = code[at..].find(['=', ';', '{']) else {
                continue;
            };
            let body = &code[at + eq..];
            let end = body.find(";\n").unwrap_or(body.len());
            for (open, _) in body[..end].match_indices("(\"") {
                let key = body[open + 2..].split('"').next().unwrap_or("");
                if keys.contains(key) {
                    found.push(format!("a table keyed by `{key}`"));
                }
            }
        }
        for (at, _) in code.match_indices("match ") {
            let Some(open) = code[at..].find('{') else {
                continue;
            };
            let body = balanced(code, at + open + 1);
            let named: std::collections::BTreeSet<&str> = body
                .lines()
                .filter_map(|line| line.split_once("=>").map(|(pattern, _)| pattern))
                .flat_map(literals)
                .filter(|l| keys.contains(*l))
                .collect();
            if named.len() >= many {
                found.push(format!("a match over {named:?}"));
            }
        }
        found
    }

    /// Analyses of the optimizer that evaluate a few ops over a lattice of their own, not
    /// facts of the ops (by file name, wherever the file sits): folding small constants, the
    /// symbolic values of shape tensors, the affine form of the attention mask under
    /// onnxruntime-genai's KV-cache contract (boolean masks, and transformers' float 4-D ones
    /// read as where they are 0 or −FLT_MAX).
    const OWN_LATTICE: &[&str] = &[
        "fold.rs",
        "sym_value.rs",
        "genai_contract.rs",
        "float_mask.rs",
    ];

    #[test]
    fn no_table_outside_the_registry_keys_by_op_name() {
        let keys = keys();
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut found = Vec::new();
        let mut analyses = Vec::new();
        for path in sources(&src) {
            let rel = path
                .strip_prefix(&src)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            let code = code(&std::fs::read_to_string(&path).unwrap());
            let tables = op_tables(&code, &keys, 8);
            let name = path.file_name().unwrap().to_string_lossy();
            if OWN_LATTICE.contains(&name.as_ref()) {
                analyses.push(name.to_string());
            } else if !rel.starts_with("ops/") {
                found.extend(tables.into_iter().map(|t| format!("{rel}: {t}")));
            }
        }
        assert!(found.is_empty(), "op facts outside src/ops: {found:#?}");
        analyses.sort();
        let mut listed = OWN_LATTICE.to_vec();
        listed.sort();
        assert_eq!(
            analyses, listed,
            "an analysis listed in OWN_LATTICE is gone"
        );
        // The scan finds what it looks for: a match over many ops, a table keyed by one.
        let fold = code(&std::fs::read_to_string(src.join("opt/fold.rs")).unwrap());
        assert!(!op_tables(&fold, &keys, 8).is_empty());
        let planted = "const T: &[(&str, i64)] = &[(\"Gelu\", 20)];\n";
        assert_eq!(op_tables(planted, &keys, 8), ["a table keyed by `Gelu`"]);
    }
}
