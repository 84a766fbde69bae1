//! The GELU activation.

use crate::config::Gelu;
use crate::ir::{Attr, GraphBuilder};

/// `Gelu(x)` (opset 20) with the variant's `approximate` attribute (`"none"`, the default,
/// is left unset).
pub fn gelu(b: &mut GraphBuilder, x: &str, variant: Gelu) -> String {
    let attrs = match variant {
        Gelu::Exact => vec![],
        Gelu::Tanh => vec![("approximate", Attr::String(variant.approximate().into()))],
    };
    b.op("Gelu", &[x], attrs)
}
