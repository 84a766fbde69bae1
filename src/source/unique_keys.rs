//! A JSON object whose keys must be unique. `serde_json` keeps the last of two equal keys
//! silently; a checkpoint that lists one tensor twice is ambiguous, so it is refused.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};

/// The entries of a JSON object in file order; deserializing fails on a repeated key, with a
/// message that names it.
#[derive(Debug, Clone, PartialEq)]
pub struct UniqueKeys<V>(pub Vec<(String, V)>);

impl<'de, V: Deserialize<'de>> Deserialize<'de> for UniqueKeys<V> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Entries<V>(PhantomData<V>);

        impl<'de, V: Deserialize<'de>> Visitor<'de> for Entries<V> {
            type Value = UniqueKeys<V>;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut seen = std::collections::HashSet::new();
                let mut entries = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    if !seen.insert(key.clone()) {
                        return Err(serde::de::Error::custom(format!(
                            "`{}` is listed twice",
                            key.escape_debug()
                        )));
                    }
                    entries.push((key, map.next_value()?));
                }
                Ok(UniqueKeys(entries))
            }
        }

        deserializer.deserialize_map(Entries(PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_keys_are_refused_by_name() {
        let ok: UniqueKeys<u32> = serde_json::from_str(r#"{"b": 1, "a": 2}"#).unwrap();
        assert_eq!(ok.0, [("b".to_string(), 1), ("a".to_string(), 2)]);
        let e = serde_json::from_str::<UniqueKeys<u32>>(r#"{"a": 1, "b": 2, "a": 3}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("`a` is listed twice"), "{e}");
    }
}
