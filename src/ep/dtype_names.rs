//! Dtype sets written and read by name (`"f16"`, `"bfloat16"`, …) for JSON and EP files.

use std::collections::BTreeSet;

use serde::{Deserialize, Deserializer, Serializer};

use crate::ir::DType;

/// Serializes a dtype set as a list of short names (`["f16", "bf16"]`).
pub(super) fn serialize<S: Serializer>(set: &BTreeSet<DType>, s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(set.iter().map(|d| d.name()))
}

/// Serializes one dtype by its short name (`"f16"`).
pub(super) fn serialize_one<S: Serializer>(dtype: &DType, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(dtype.name())
}

/// Deserializes one dtype name, as [`deserialize_opt`] reads each of a list.
pub(super) fn deserialize_one_opt<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<DType>, D::Error> {
    parse::<D>(&String::deserialize(d)?).map(Some)
}

/// A model dtype by name, or a serde error listing the names.
fn parse<'de, D: Deserializer<'de>>(n: &str) -> Result<DType, D::Error> {
    DType::parse_model_dtype(n).ok_or_else(|| {
        serde::de::Error::custom(format!(
            "unknown dtype `{n}`; expected f32, f16 or bf16 (or float32, float16, bfloat16)"
        ))
    })
}

/// Deserializes a list of dtype names (`f32`/`float32`, `f16`/`float16`, `bf16`/`bfloat16`).
pub(super) fn deserialize_opt<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<BTreeSet<DType>>, D::Error> {
    let names = Vec::<String>::deserialize(d)?;
    names
        .iter()
        .map(|n| parse::<D>(n))
        .collect::<Result<_, _>>()
        .map(Some)
}
