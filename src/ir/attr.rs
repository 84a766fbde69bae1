//! Node attributes.

use super::graph::Graph;
use super::tensor::TensorData;

/// The value of a node attribute, in the ONNX attribute kinds mobius handles.
#[derive(Debug, Clone, PartialEq)]
pub enum Attr {
    /// A single float (`AttributeProto.f`).
    Float(f32),
    /// A single integer (`AttributeProto.i`).
    Int(i64),
    /// A string (`AttributeProto.s`).
    String(String),
    /// A tensor (`AttributeProto.t`), e.g. the value of a `Constant` node.
    Tensor(TensorData),
    /// A list of floats.
    Floats(Vec<f32>),
    /// A list of integers.
    Ints(Vec<i64>),
    /// A list of strings.
    Strings(Vec<String>),
    /// A subgraph (`AttributeProto.g`): the branch of an `If`, the body of a `Loop` or `Scan`.
    /// It may read values of the enclosing graphs by name ([`Graph::free_values`]); it holds no
    /// initializers of its own (the importer moves them to the main graph).
    Graph(Box<Graph>),
}

/// A node's attributes, sorted by name, one value per name: the map a node carries.
///
/// A sorted vector rather than a `BTreeMap`: nodes carry one to six attributes, and a B-tree
/// allocates a whole leaf (eleven keys and values, about 900 bytes) for the first, so the
/// graph of a large model spent more on attribute leaves than on the rest of its nodes.
/// Lookups are binary searches over a handful of names.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Attrs(Vec<(String, Attr)>);

impl Attrs {
    /// No attributes.
    pub fn new() -> Attrs {
        Attrs(Vec::new())
    }

    fn position(&self, name: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|(k, _)| k.as_str().cmp(name))
    }

    /// The value of attribute `name`.
    pub fn get(&self, name: &str) -> Option<&Attr> {
        self.position(name).ok().map(|i| &self.0[i].1)
    }

    /// Whether the node sets attribute `name`.
    pub fn contains_key(&self, name: &str) -> bool {
        self.position(name).is_ok()
    }

    /// Sets attribute `name`, returning the value it replaces.
    pub fn insert(&mut self, name: String, value: Attr) -> Option<Attr> {
        match self.position(&name) {
            Ok(i) => Some(std::mem::replace(&mut self.0[i].1, value)),
            Err(i) => {
                self.0.insert(i, (name, value));
                None
            }
        }
    }

    /// The attributes, by name.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&String, &Attr)> + ExactSizeIterator {
        self.0.iter().map(|(k, v)| (k, v))
    }

    /// The attribute names, sorted.
    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &String> + ExactSizeIterator {
        self.0.iter().map(|(k, _)| k)
    }
}

/// Later values of a repeated name replace earlier ones (as inserting them in turn would); the
/// vector holds exactly its attributes (a vector grown by pushes holds at least four).
impl FromIterator<(String, Attr)> for Attrs {
    fn from_iter<I: IntoIterator<Item = (String, Attr)>>(iter: I) -> Attrs {
        let mut pairs: Vec<(String, Attr)> = iter.into_iter().collect();
        // Stable: equal names keep their order, and the last of each run is kept.
        pairs.sort_by(|a, b| a.0.cmp(&b.0));
        let mut kept: Vec<(String, Attr)> = Vec::with_capacity(pairs.len());
        for pair in pairs {
            match kept.last_mut() {
                Some(last) if last.0 == pair.0 => *last = pair,
                _ => kept.push(pair),
            }
        }
        Attrs(kept)
    }
}

impl<const N: usize> From<[(String, Attr); N]> for Attrs {
    fn from(pairs: [(String, Attr); N]) -> Attrs {
        pairs.into_iter().collect()
    }
}

impl std::ops::Index<&str> for Attrs {
    type Output = Attr;

    /// # Panics
    /// If the node does not set attribute `name`.
    fn index(&self, name: &str) -> &Attr {
        match self.get(name) {
            Some(v) => v,
            None => panic!("no attribute `{name}`"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Attr, Attrs};

    #[test]
    fn attrs_stay_sorted_and_unique() {
        let mut a = Attrs::new();
        assert_eq!(a.insert("perm".into(), Attr::Ints(vec![1, 0])), None);
        assert_eq!(a.insert("axis".into(), Attr::Int(1)), None);
        assert_eq!(a.insert("to".into(), Attr::Int(10)), None);
        assert_eq!(a.insert("axis".into(), Attr::Int(2)), Some(Attr::Int(1)));
        assert_eq!(
            a.keys().map(String::as_str).collect::<Vec<_>>(),
            ["axis", "perm", "to"]
        );
        assert_eq!(a["axis"], Attr::Int(2));
        assert!(a.contains_key("to") && !a.contains_key("t"));
        assert_eq!(a.get("perm"), Some(&Attr::Ints(vec![1, 0])));
        assert_eq!(a.iter().count(), 3);
    }

    #[test]
    fn collecting_keeps_the_last_value_of_a_name() {
        let a: Attrs = [
            ("to".to_string(), Attr::Int(1)),
            ("axis".to_string(), Attr::Int(0)),
            ("to".to_string(), Attr::Int(7)),
        ]
        .into_iter()
        .collect();
        let pairs: Vec<(&String, &Attr)> = a.iter().collect();
        assert_eq!(pairs.len(), 2);
        assert_eq!(a["to"], Attr::Int(7));
        assert_eq!(a.get("axis"), Some(&Attr::Int(0)));
        assert_eq!(
            Attrs::from([("b".to_string(), Attr::Int(1))])
                .iter()
                .count(),
            1
        );
    }
}
