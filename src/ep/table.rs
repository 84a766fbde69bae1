//! Human- and machine-readable listings of EP capabilities (`mobius eps`).

use std::collections::BTreeSet;

use serde_json::Value;

use super::capabilities::EpCapabilities;
use crate::ir::DType;

const HEADERS: [&str; 12] = [
    "name",
    "dtypes",
    "default dtype",
    "gqa dtypes",
    "qkv pack dtypes",
    "fused rope",
    "skip norm",
    "attention",
    "rotary",
    "graph capture",
    "share buffer",
    "quantized matmul",
];

/// A fixed-width text table of the main capabilities, one row per EP, in the given order.
///
/// Columns: name, the model dtypes the EP runs and its default, GQA dtypes, QKV-pack dtypes, fused RoPE, skip norm, attention, rotary
/// embedding, graph capture, past/present share buffer, and how `--quant` weights run
/// (`MatMulNBits` with its default `accuracy_level`, or `DequantizeLinear` + `MatMul`). Each
/// line ends with `\n`.
pub fn ep_table(eps: &[EpCapabilities]) -> String {
    let rows: Vec<[String; 12]> = eps.iter().map(row).collect();
    let widths: Vec<usize> = (0..HEADERS.len())
        .map(|i| {
            rows.iter()
                .map(|r| r[i].chars().count())
                .chain([HEADERS[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let header = HEADERS.map(String::from);
    std::iter::once(&header)
        .chain(&rows)
        .map(|cells| {
            let line: Vec<String> = cells.iter().zip(&widths).map(|(c, w)| pad(c, *w)).collect();
            format!("{}\n", line.join("  ").trim_end())
        })
        .collect()
}

/// `cell` followed by spaces up to `width` characters (none when it is already that wide).
fn pad(cell: &str, width: usize) -> String {
    let fill = width.saturating_sub(cell.chars().count());
    format!("{cell}{}", " ".repeat(fill))
}

/// Every field of every EP as a JSON array of objects (dtype sets as name lists).
pub fn ep_json(eps: &[EpCapabilities]) -> Value {
    serde_json::to_value(eps).expect("EP capabilities have string keys and serialize infallibly")
}

fn row(c: &EpCapabilities) -> [String; 12] {
    [
        c.name.clone(),
        names(&c.dtypes),
        c.default_dtype.name().into(),
        names(&c.gqa_dtypes),
        names(&c.qkv_pack_dtypes),
        yes_no(c.supports_fused_rope),
        yes_no(c.supports_skip_layer_norm),
        yes_no(c.supports_attention),
        yes_no(c.supports_rotary_embedding),
        yes_no(c.enable_graph_capture),
        yes_no(c.supports_past_present_share_buffer),
        quantized_matmul(c),
    ]
}

/// How a block-quantized MatMul runs on the EP.
fn quantized_matmul(c: &EpCapabilities) -> String {
    if c.supports_matmul_nbits && c.supports_contrib_ops {
        format!("MatMulNBits (level {})", c.default_int4_accuracy_level)
    } else {
        "DequantizeLinear".into()
    }
}

fn names(set: &BTreeSet<DType>) -> String {
    if set.is_empty() {
        return "-".into();
    }
    set.iter().map(|d| d.name()).collect::<Vec<_>>().join(",")
}

fn yes_no(b: bool) -> String {
    if b { "yes" } else { "no" }.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_wider_than_the_format_limit_is_padded_without_panicking() {
        // `{:<w$}` panics for widths of 65,536 and more; the table never uses it.
        let long = EpCapabilities::new("x".repeat(70_000));
        let table = ep_table(&[long, EpCapabilities::new("cpu")]);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[2].starts_with(&format!("cpu{}  ", " ".repeat(70_000 - 3))));
    }
}
