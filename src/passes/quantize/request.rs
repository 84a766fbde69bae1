//! What the quantization pass is asked ([`QuantRequest`]) and what it reports
//! ([`QuantSummary`]), with the helpers its MatMul and embedding parts share.

use crate::ir::{DType, QuantParams};

/// What to quantize and how.
#[derive(Debug, Clone, PartialEq)]
pub struct QuantRequest {
    /// Bits, block size and symmetry.
    pub params: QuantParams,
    /// Weights to keep in float: a weight is kept when its initializer name or its MatMul
    /// node's name matches one of these (`*` matches any run of characters; a pattern
    /// without `*` matches anywhere in the name).
    pub exclude: Vec<String>,
    /// Quantize the token-embedding tables too (see [`super::embeddings`]).
    pub embeddings: bool,
}

impl QuantRequest {
    /// The first exclusion pattern matching one of `names`.
    pub(super) fn excluding(&self, names: &[&str]) -> Option<&str> {
        self.exclude
            .iter()
            .find(|pat| names.iter().any(|name| name_matches(pat, name)))
            .map(String::as_str)
    }
}

/// `[rows, cols]` of a weight that can be quantized: a non-empty 2-D f32/f16/bf16 tensor.
pub(super) fn float_matrix(dtype: DType, shape: &[usize]) -> Option<[usize; 2]> {
    match shape {
        &[rows, cols] if dtype.is_float() && dtype != DType::F64 && rows > 0 && cols > 0 => {
            Some([rows, cols])
        }
        _ => None,
    }
}

/// What [`super::quantize_graph`] did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QuantSummary {
    /// Weights quantized.
    pub weights: usize,
    /// MatMul nodes now reading a quantized weight.
    pub matmuls: usize,
    /// Embedding tables quantized.
    pub embeddings: usize,
    /// Bytes of the quantized weights in float (their dtype).
    pub float_bytes: u64,
    /// Bytes of their quantized values, scales and zero points as stored.
    pub quantized_bytes: u64,
    /// Weights kept in float because `exclude` matched, with the pattern.
    pub excluded: Vec<(String, String)>,
    /// A remark on how the request was carried out, if any.
    pub note: Option<String>,
    /// Whether a tied LM head and its embedding share one quantized table.
    pub shared: bool,
    /// Float tables kept in their checkpoint's narrower type (see
    /// [`crate::passes::narrow_tables`]), with that type.
    pub narrowed: Vec<(String, DType)>,
}

impl QuantSummary {
    /// Records that `weight` stays float because of `pattern` (once).
    pub(super) fn exclude(&mut self, weight: String, pattern: &str) {
        if !self.excluded.iter().any(|(w, _)| *w == weight) {
            self.excluded.push((weight, pattern.to_string()));
        }
    }
}

impl std::fmt::Display for QuantSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
        write!(
            f,
            "{} MatMul weights quantized ({} nodes)",
            self.weights, self.matmuls
        )?;
        match self.embeddings {
            0 => {}
            1 => write!(f, " and 1 embedding table")?,
            n => write!(f, " and {n} embedding tables")?,
        }
        write!(
            f,
            ": {:.2} MiB → {:.2} MiB",
            mib(self.float_bytes),
            mib(self.quantized_bytes)
        )?;
        for (name, pattern) in &self.excluded {
            write!(f, "; kept in float: {name} (--quant-exclude {pattern})")?;
        }
        if self.shared {
            write!(f, " (the tied LM head and the embedding share one table)")?;
        }
        for (name, dtype) in &self.narrowed {
            write!(
                f,
                "; {name} kept in {dtype} as in the checkpoint (its rows cast to f32)"
            )?;
        }
        if let Some(note) = &self.note {
            write!(f, "; {note}")?;
        }
        Ok(())
    }
}

/// Whether `caps` runs `com.microsoft::GatherBlockQuantized` for a model of `dtype` (the
/// 4-bit form of `--quant-embeddings`).
pub fn runs_gather_block_quantized(caps: &crate::ep::EpCapabilities, dtype: DType) -> bool {
    caps.supports_contrib_ops
        && caps.supports_matmul_nbits
        && matches!(dtype, DType::F32 | DType::F16)
}

/// Whether `name` matches `pattern` (see [`QuantRequest::exclude`]).
pub fn name_matches(pattern: &str, name: &str) -> bool {
    if !pattern.contains('*') {
        return name.contains(pattern);
    }
    let parts: Vec<&str> = pattern.split('*').collect();
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !name.starts_with(first) || name.len() < first.len() + last.len() || !name.ends_with(last) {
        return false;
    }
    let mut rest = &name[first.len()..name.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exclusion_patterns_match_substrings_and_globs() {
        assert!(name_matches("lm_head", "lm_head.weight"));
        assert!(name_matches("mlp", "model.layers.0.mlp.up_proj.weight"));
        assert!(!name_matches("lm_head", "model.embed_tokens.weight"));
        assert!(name_matches(
            "model.layers.*.mlp.*",
            "model.layers.3.mlp.down_proj.weight"
        ));
        assert!(!name_matches(
            "model.layers.*.mlp.*",
            "model.layers.3.self_attn.q_proj.weight"
        ));
        assert!(name_matches("*_proj.weight", "x.q_proj.weight"));
        assert!(!name_matches("*_proj.weight", "x.q_proj.bias"));
        assert!(name_matches("*", "anything"));
    }
}
