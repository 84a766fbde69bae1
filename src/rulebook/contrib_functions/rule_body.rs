//! Inline rules → ONNX function bodies. An inline rule says that one output of a contrib op
//! call equals a standard-ONNX expression of the call's inputs and attributes:
//! `(get3 (com.microsoft::SkipLayerNormalization/4 ?a ?b ?w ?beta ?eps)) → (Add ?a ?b)`.
//! Read as a function body, the pattern's input variables are the formal inputs, its
//! attribute variables are references to the call's attributes, and each rule gives the
//! nodes computing one output; the rules of one op share their common subexpressions.
//!
//! Only what an ONNX function can say exactly is accepted: the pattern binds each input and
//! attribute of the op to a distinct variable, the only side condition is `attr-is-set` on an
//! attribute the replacement reads (the function then declares the op's default for it, so a
//! call without the attribute means what the op means), the replacement is built of standard
//! ops, attribute literals and the bound variables, and the rules cover every output from 0 up
//! to the last one they mention (onnxruntime refuses a function output the body does not
//! produce). A rule variant with fewer inputs is covered by the body of the full variant when
//! that body, with the missing inputs absent, is the variant's replacement (ONNX drops trailing
//! absent inputs); calls with other input counts get no body.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use egg::{ENodeOrVar, Id, Language, PatternAst, Var};

use crate::ir::Attr;
use crate::onnx::export::attribute_proto;
use crate::onnx::proto::{self, AttributeProto, FunctionProto, NodeProto};
use crate::ops::value::AttrValue;
use crate::opt::lang::Onnx;
use crate::opt::rules::{Replacement, RuleSpec};
use crate::{Error, Result};

/// The default-domain opset the bodies import.
pub const BODY_OPSET: i64 = crate::opt::opset::NEWEST;

/// The one condition a body can express: the attribute is set on the call (else the op's
/// default stands in for it).
const ATTR_IS_SET: &str = "attr-is-set";

/// A contrib op's body derived from its inline rules.
#[derive(Debug, Clone)]
pub struct RuleBody {
    /// The function (domain and name of the op).
    pub function: FunctionProto,
    /// The numbers of leading present inputs a call may have for the body to be exact.
    pub arities: Vec<usize>,
}

/// A standard-ONNX expression over the formal inputs and attributes of a body.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Term {
    /// Formal input `i`.
    Input(usize),
    /// An absent optional input.
    Absent,
    /// An op application (trailing absent inputs dropped); reads as its output 0.
    Op(OpTerm),
    /// Output `i` of a multi-output op.
    Get(usize, OpTerm),
}

/// A standard op with its inputs and set attributes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct OpTerm {
    op: String,
    outputs: usize,
    inputs: Vec<Term>,
    attrs: Vec<(String, AttrTerm)>,
}

/// An attribute of a body node: a literal, or the call's attribute of that name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum AttrTerm {
    Value(AttrValue),
    Ref(String),
}

/// The rules of one op: by input count, by output, the rule's name and its term.
type Variants = BTreeMap<usize, BTreeMap<usize, (String, Term)>>;

/// A body node's identity: op, input values, attributes.
type NodeKey = (String, Vec<String>, Vec<(String, AttrTerm)>);

/// What a rule's pattern binds: the op, which output, and the variables of its inputs and
/// attributes.
struct Lhs {
    op: String,
    output: usize,
    inputs: Vec<Var>,
    attrs: Vec<(String, Var)>,
}

/// One rule read as the body of one output of one input count.
struct RuleOutput {
    lhs: Lhs,
    term: Term,
    /// The attributes the replacement reads (all required to be set).
    refs: BTreeSet<String>,
}

/// Derives the bodies of the contrib ops of `rules` (the inline rules), in op order.
/// `default(op, attr)` is the op's default value of an attribute the rules require to be set.
pub fn derive(
    rules: &[RuleSpec],
    default: impl Fn(&str, &str) -> Option<Attr>,
) -> Result<Vec<RuleBody>> {
    let mut ops: BTreeMap<String, Variants> = BTreeMap::new();
    let mut input_names: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut refs: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for rule in rules {
        let read = read_rule(rule).map_err(|why| {
            Error::Graph(format!(
                "{}: inline rule `{}` cannot be a function body: {why}",
                rule.origin, rule.name
            ))
        })?;
        let arity = read.lhs.inputs.len();
        let names = input_names.entry(read.lhs.op.clone()).or_default();
        if names.len() < arity {
            *names = read.lhs.inputs.iter().map(var_name).collect();
        }
        refs.entry(read.lhs.op.clone())
            .or_default()
            .extend(read.refs);
        let previous = ops
            .entry(read.lhs.op)
            .or_default()
            .entry(arity)
            .or_default()
            .insert(read.lhs.output, (rule.name.clone(), read.term));
        if let Some((other, _)) = previous {
            return Err(Error::Graph(format!(
                "{}: inline rules `{other}` and `{}` both give output {} of the same call",
                rule.origin, rule.name, read.lhs.output
            )));
        }
    }
    ops.into_iter()
        .map(|(op, variants)| {
            let defaults = refs[&op]
                .iter()
                .map(|attr| {
                    default(&op, attr)
                        .map(|v| attribute_proto(attr, &v))
                        .ok_or_else(|| {
                            Error::Graph(format!(
                            "the inline rules of {op} require `{attr}` to be set, and no default \
                             of `{attr}` is known for {op}"
                        ))
                        })
                })
                .collect::<Result<Vec<_>>>()?;
            body(&op, &variants, &input_names[&op], defaults)
        })
        .collect()
}

/// The body of `op` from its rules by input count and output.
fn body(
    op: &str,
    variants: &Variants,
    input_names: &[String],
    attribute_proto: Vec<AttributeProto>,
) -> Result<RuleBody> {
    let (&full, outputs) = variants
        .last_key_value()
        .expect("an op with rules has a variant");
    if let Some(gap) = (0..outputs.len()).find(|o| !outputs.contains_key(o)) {
        return Err(Error::Graph(format!(
            "{op}: the inline rules of its {full}-input calls give outputs {:?} but not output \
             {gap}; a function body must produce every output up to the last",
            outputs.keys().collect::<Vec<_>>()
        )));
    }
    let arities = variants
        .iter()
        .filter(|(&arity, rules)| {
            arity == full
                || (rules.len() == outputs.len()
                    && outputs.iter().all(|(o, (_, term))| {
                        rules.get(o).map(|(_, t)| t) == Some(&without_inputs_from(term, arity))
                    }))
        })
        .map(|(&arity, _)| arity)
        .collect();
    let mut emitter = Emitter::new(input_names, &attribute_proto);
    let values: Vec<String> = outputs.values().map(|(_, t)| emitter.value(t)).collect();
    let (domain, name) = op.split_once("::").unwrap_or(("", op));
    Ok(RuleBody {
        function: FunctionProto {
            name: name.to_string(),
            domain: domain.to_string(),
            input: input_names.to_vec(),
            output: (0..values.len()).map(|o| format!("output{o}")).collect(),
            node: emitter.finish(values),
            attribute_proto,
            opset_import: vec![proto::OperatorSetIdProto {
                domain: String::new(),
                version: BODY_OPSET,
            }],
            ..Default::default()
        },
        arities,
    })
}

/// `term` for a call whose inputs from `arity` on are absent.
fn without_inputs_from(term: &Term, arity: usize) -> Term {
    match term {
        Term::Input(i) if *i >= arity => Term::Absent,
        Term::Input(_) | Term::Absent => term.clone(),
        Term::Op(op) => Term::Op(op_without_inputs_from(op, arity)),
        Term::Get(i, op) => Term::Get(*i, op_without_inputs_from(op, arity)),
    }
}

fn op_without_inputs_from(op: &OpTerm, arity: usize) -> OpTerm {
    let mut inputs: Vec<Term> = op
        .inputs
        .iter()
        .map(|t| without_inputs_from(t, arity))
        .collect();
    trim_absent(&mut inputs);
    OpTerm {
        inputs,
        ..op.clone()
    }
}

fn trim_absent(inputs: &mut Vec<Term>) {
    while inputs.last() == Some(&Term::Absent) {
        inputs.pop();
    }
}

fn var_name(v: &Var) -> String {
    v.to_string().trim_start_matches('?').to_string()
}

/// Reads one rule, or says why it is not a body.
fn read_rule(rule: &RuleSpec) -> std::result::Result<RuleOutput, String> {
    let Replacement::Pattern(replacement) = &rule.replacement else {
        return Err("its replacement is a Rust applier".into());
    };
    let lhs = read_lhs(&rule.pattern.ast)?;
    let mut required = BTreeSet::new();
    for when in &rule.conditions {
        if when.name != ATTR_IS_SET {
            let name = &when.name;
            return Err(format!("condition `{name}` has no ONNX function form"));
        }
        required.extend(when.vars.iter().copied());
    }
    let reader = Reader {
        lhs: &lhs,
        required: &required,
        ast: &replacement.ast,
    };
    let mut refs = BTreeSet::new();
    let term = reader.term(root(&replacement.ast), &mut refs)?;
    if term == Term::Absent {
        return Err("its replacement is an absent input".into());
    }
    Ok(RuleOutput { lhs, term, refs })
}

fn root<L: Language>(ast: &egg::RecExpr<L>) -> Id {
    Id::from(ast.as_ref().len() - 1)
}

/// `(get<i> (domain::Op/N ?in… ?attr…))` or `(domain::Op ?in… ?attr…)`.
fn read_lhs(ast: &PatternAst<Onnx>) -> std::result::Result<Lhs, String> {
    let (output, op_id) = match &ast[root(ast)] {
        ENodeOrVar::ENode(Onnx::Get { index, tuple }) => (*index, tuple[0]),
        _ => (0, root(ast)),
    };
    let ENodeOrVar::ENode(Onnx::Op(op)) = &ast[op_id] else {
        return Err("its pattern is not rooted at an op".into());
    };
    if !op.op.as_str().contains("::") {
        return Err(format!("`{}` is not a contrib op", op.op));
    }
    let mut seen = BTreeSet::new();
    let mut var = |id: Id, what: &str| match &ast[id] {
        ENodeOrVar::Var(v) if seen.insert(*v) => Ok(*v),
        _ => Err(format!(
            "the pattern must bind {what} of `{}` to a variable of its own",
            op.op
        )),
    };
    let inputs = op
        .input_ids()
        .iter()
        .enumerate()
        .map(|(i, &id)| var(id, &format!("input {i}")))
        .collect::<std::result::Result<_, _>>()?;
    let attrs = op
        .attr_names()
        .into_iter()
        .zip(op.attr_ids())
        .map(|(name, &id)| Ok((name.to_string(), var(id, &format!("attribute `{name}`"))?)))
        .collect::<std::result::Result<_, String>>()?;
    Ok(Lhs {
        op: op.op.to_string(),
        output,
        inputs,
        attrs,
    })
}

/// Reads a replacement against the variables its pattern binds.
struct Reader<'a> {
    lhs: &'a Lhs,
    required: &'a BTreeSet<Var>,
    ast: &'a PatternAst<Onnx>,
}

impl Reader<'_> {
    /// The value at `id` (an input position).
    fn term(&self, id: Id, refs: &mut BTreeSet<String>) -> std::result::Result<Term, String> {
        match &self.ast[id] {
            ENodeOrVar::Var(v) => self
                .lhs
                .inputs
                .iter()
                .position(|i| i == v)
                .map(Term::Input)
                .ok_or_else(|| format!("{v} is used as an input but is not an input of the op")),
            ENodeOrVar::ENode(Onnx::Absent) => Ok(Term::Absent),
            ENodeOrVar::ENode(Onnx::Op(_)) => Ok(Term::Op(self.op(id, refs)?)),
            ENodeOrVar::ENode(Onnx::Get { index, tuple }) => {
                Ok(Term::Get(*index, self.op(tuple[0], refs)?))
            }
            ENodeOrVar::ENode(other) => {
                Err(format!("`{other}` has no meaning inside a function body"))
            }
        }
    }

    fn op(&self, id: Id, refs: &mut BTreeSet<String>) -> std::result::Result<OpTerm, String> {
        let ENodeOrVar::ENode(Onnx::Op(op)) = &self.ast[id] else {
            return Err("`get<i>` must read an op".into());
        };
        if op.op.as_str().contains("::") {
            return Err(format!(
                "`{}` is not a standard op (bodies are standard ONNX)",
                op.op
            ));
        }
        let mut inputs = op
            .input_ids()
            .iter()
            .map(|&c| self.term(c, refs))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        trim_absent(&mut inputs);
        let mut attrs = Vec::new();
        for (name, &c) in op.attr_names().into_iter().zip(op.attr_ids()) {
            let value = match &self.ast[c] {
                ENodeOrVar::ENode(Onnx::Attr(AttrValue::Unset)) => continue,
                ENodeOrVar::ENode(Onnx::Attr(v)) => AttrTerm::Value(v.clone()),
                ENodeOrVar::Var(v) => AttrTerm::Ref(self.attr_ref(*v)?),
                ENodeOrVar::ENode(other) => {
                    return Err(format!("attribute `{name}` of `{}` is `{other}`", op.op))
                }
            };
            if let AttrTerm::Ref(r) = &value {
                refs.insert(r.clone());
            }
            attrs.push((name.to_string(), value));
        }
        Ok(OpTerm {
            op: op.op.to_string(),
            outputs: op.outputs,
            inputs,
            attrs,
        })
    }

    /// The op attribute bound to `v`, which the rule must require to be set: a reference
    /// to an attribute the call may leave unset takes the op's default, and only then means
    /// what the rule means.
    fn attr_ref(&self, v: Var) -> std::result::Result<String, String> {
        let (name, _) = self
            .lhs
            .attrs
            .iter()
            .find(|(_, a)| *a == v)
            .ok_or_else(|| {
                format!("{v} is used as an attribute but is not an attribute of the op")
            })?;
        if !self.required.contains(&v) {
            return Err(format!(
                "the replacement reads attribute `{name}` ({v}) without `when {ATTR_IS_SET} {v}`"
            ));
        }
        Ok(name.clone())
    }
}

/// Turns terms into body nodes, one node per distinct op application (an op read through
/// `get<i>` and the same op read as a plain value share the node: optional outputs do not
/// change output 0).
struct Emitter<'a> {
    inputs: &'a [String],
    /// The function's attribute defaults, which give the referenced attributes their types.
    defaults: &'a [AttributeProto],
    nodes: Vec<NodeProto>,
    index: HashMap<NodeKey, usize>,
}

impl<'a> Emitter<'a> {
    fn new(inputs: &'a [String], defaults: &'a [AttributeProto]) -> Emitter<'a> {
        Emitter {
            inputs,
            defaults,
            nodes: Vec::new(),
            index: HashMap::new(),
        }
    }

    /// The name of the value `term` computes.
    fn value(&mut self, term: &Term) -> String {
        match term {
            Term::Input(i) => self.inputs[*i].clone(),
            Term::Absent => String::new(),
            Term::Op(op) => self.output(op, 0),
            Term::Get(i, op) => self.output(op, *i),
        }
    }

    fn output(&mut self, op: &OpTerm, index: usize) -> String {
        let inputs: Vec<String> = op.inputs.iter().map(|t| self.value(t)).collect();
        let key = (op.op.clone(), inputs, op.attrs.clone());
        let n = match self.index.get(&key) {
            Some(&n) => n,
            None => {
                let n = self.nodes.len();
                self.nodes.push(NodeProto {
                    op_type: op.op.clone(),
                    input: key.1.clone(),
                    attribute: op
                        .attrs
                        .iter()
                        .map(|(name, a)| self.attribute(name, a))
                        .collect(),
                    ..Default::default()
                });
                self.index.insert(key, n);
                n
            }
        };
        let node = &mut self.nodes[n];
        let outputs = op.outputs.max(index + 1).max(node.output.len());
        node.output = (0..outputs).map(|k| format!("{}_{n}_{k}", op.op)).collect();
        node.output[index].clone()
    }

    fn attribute(&self, name: &str, a: &AttrTerm) -> AttributeProto {
        match a {
            AttrTerm::Value(v) => attribute_proto(
                name,
                &v.to_attr().expect("unset attributes are left out of terms"),
            ),
            AttrTerm::Ref(r) => AttributeProto {
                name: name.to_string(),
                ref_attr_name: r.clone(),
                r#type: self
                    .defaults
                    .iter()
                    .find(|d| d.name == *r)
                    .expect("every referenced attribute has a default")
                    .r#type,
                ..Default::default()
            },
        }
    }

    /// The nodes, with `values[o]` named `output{o}` (renamed where a node computes it, else
    /// copied by an Identity) and every node named after its first output.
    fn finish(mut self, values: Vec<String>) -> Vec<NodeProto> {
        let mut renames: HashMap<String, String> = HashMap::new();
        let mut copies = Vec::new();
        for (o, value) in values.into_iter().enumerate() {
            let out = format!("output{o}");
            let computed = self.nodes.iter().any(|n| n.output.contains(&value));
            if computed && !renames.contains_key(&value) {
                renames.insert(value, out);
            } else {
                let source = renames.get(&value).cloned().unwrap_or(value);
                copies.push(NodeProto {
                    op_type: "Identity".into(),
                    input: vec![source],
                    output: vec![out],
                    ..Default::default()
                });
            }
        }
        for node in &mut self.nodes {
            for v in node.input.iter_mut().chain(node.output.iter_mut()) {
                if let Some(r) = renames.get(v) {
                    *v = r.clone();
                }
            }
        }
        self.nodes.extend(copies);
        for node in &mut self.nodes {
            node.name = format!("{}_{}", node.op_type, node.output[0]);
        }
        self.nodes
    }
}
