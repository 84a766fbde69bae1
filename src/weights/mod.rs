//! Checkpoint weights: safetensors files (single or sharded), name lookup, lazy evaluation of
//! initializer sources, dtype conversion and streaming into the external data file.

pub mod convert;
mod dispatch;
pub mod eval;
mod matrix;
mod moe_experts;
mod nbits_columns;
pub mod prequantized;
mod quantized;
pub mod sink;
pub mod store;
pub mod transpose;
mod unmap;

pub use quantized::{relayout, relayout_source};

use crate::ir::{Graph, TensorSource};
use crate::{Error, Result};
use eval::Evaluator;

/// Checks every initializer that has a source: each checkpoint tensor exists with the shape the
/// graph expects, and its dtype converts to the initializer's dtype. Reads no tensor data.
pub fn check_sources(graph: &Graph, evaluator: &Evaluator<'_>) -> Result<()> {
    for init in &graph.initializers {
        let Some(src) = &init.source else { continue };
        expect_shape(src, &init.shape, &init.name, evaluator)?;
        let info = evaluator.describe(src)?;
        if !convert::can_convert(info.dtype, init.dtype) {
            return Err(Error::UnsupportedConversion {
                name: init.name.clone(),
                from: info.dtype.to_string(),
                to: init.dtype.to_string(),
            });
        }
    }
    Ok(())
}

fn expect_shape(
    src: &TensorSource,
    expected: &[usize],
    init: &str,
    ev: &Evaluator<'_>,
) -> Result<()> {
    match src {
        TensorSource::Checkpoint(name) => {
            let (actual, path) = ev.checkpoint_shape(name)?;
            if actual != expected {
                return Err(Error::ShapeMismatch {
                    name: name.clone(),
                    path,
                    expected: expected.to_vec(),
                    actual,
                });
            }
            Ok(())
        }
        TensorSource::Transpose(inner) if expected.len() == 2 => {
            expect_shape(inner, &[expected[1], expected[0]], init, ev)
        }
        _ => {
            let actual = ev.describe(src)?.shape;
            if actual != expected {
                return Err(Error::Graph(format!(
                    "initializer `{init}` evaluates to shape {actual:?}, declared {expected:?}"
                )));
            }
            Ok(())
        }
    }
}
