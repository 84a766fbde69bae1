//! Bounds on work, in one place.
//!
//! Every size that input controls — a config's layer count, a tensor's element count in the
//! reference interpreter, the memory one interpreter run may hold — is checked against a limit
//! defined here, with an error that names what was too large, the limit, and how to raise it
//! (where it can be raised). The optimizer's e-graph bounds are [`crate::opt::Limits`].

use crate::{Error, Result};

/// Largest config sizes mobius accepts. Generous enough for every published model (the largest
/// today: 126 layers, 128 heads, 16,384 hidden, 262,144 vocabulary, 10M positions), small enough
/// that a hostile config.json cannot make a build run for minutes or exhaust memory.
pub mod config {
    /// `num_hidden_layers`.
    pub const MAX_LAYERS: usize = 2048;
    /// `num_attention_heads` and `num_key_value_heads`.
    pub const MAX_HEADS: usize = 4096;
    /// `num_local_experts` / `num_experts` of a mixture-of-experts decoder (and its top-k).
    pub const MAX_EXPERTS: usize = 4096;
    /// `hidden_size`, `intermediate_size`, `head_dim`.
    pub const MAX_WIDTH: usize = 1 << 20;
    /// A short convolution's kernel width (`conv_L_cache`): the graph spells one slice per tap,
    /// and published models use 3 or 4.
    pub const MAX_CONV_KERNEL: usize = 64;
    /// `vocab_size`.
    pub const MAX_VOCAB: usize = 1 << 24;
    /// `max_position_embeddings` (and any other position count).
    pub const MAX_POSITIONS: usize = 1 << 26;
    /// Elements of one RoPE table (`max_position_embeddings × head_dim / 2`), which mobius
    /// computes and writes itself: 10M positions × 128-wide heads still fit.
    pub const MAX_ROPE_TABLE: usize = 1 << 31;
}

/// The element count of a tensor of shape `shape`, or `None` when its non-zero dimensions
/// multiply past `usize` — even when another dimension is 0, so that every product of some of
/// the dimensions of a shape this accepts fits in `usize`. The one overflow-safe element count:
/// byte counts are [`crate::ir::DType::bytes_for`].
pub fn numel(shape: &[usize]) -> Option<usize> {
    let nonzero = shape
        .iter()
        .filter(|&&d| d != 0)
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))?;
    Some(if shape.contains(&0) { 0 } else { nonzero })
}

/// Budgets of one reference-interpreter run (`mobius run`, `mobius verify`, `--verify-rewrites`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InterpLimits {
    /// Largest element count of any one tensor (input, initializer or computed value).
    pub max_tensor_elements: u64,
    /// Largest number of bytes all live values of one run may hold together (each subgraph
    /// run of a control-flow op counts its own values against it too).
    pub max_run_bytes: u64,
    /// Most iterations one `Loop` node may run in one evaluation.
    pub max_loop_iterations: u64,
}

impl Default for InterpLimits {
    fn default() -> InterpLimits {
        InterpLimits {
            max_tensor_elements: 1 << 28,
            max_run_bytes: 8 << 30,
            max_loop_iterations: 1 << 20,
        }
    }
}

/// The command-line flag that raises [`InterpLimits::max_tensor_elements`].
pub const TENSOR_ELEMENTS_FLAG: &str = "--max-tensor-elements";
/// The command-line flag that raises [`InterpLimits::max_run_bytes`] (in MiB).
pub const RUN_MEMORY_FLAG: &str = "--max-memory-mib";
/// The command-line flag that raises [`InterpLimits::max_loop_iterations`].
pub const LOOP_ITERATIONS_FLAG: &str = "--max-loop-iterations";

/// Largest number of bytes the fingerprints of `--verify-rewrites` (one value per e-class) may
/// hold together; past it verification becomes partial (see [`crate::opt::fingerprint`]).
pub const MAX_FINGERPRINT_BYTES: u64 = 4 << 30;

/// Largest number of nodes the model-local function calls of one model may expand to. Real
/// models expand to well under a million; nested calls can multiply a small file into billions.
pub const MAX_EXPANDED_NODES: u64 = 10_000_000;

/// Largest number of shard files a sharded checkpoint's index may list (the largest published
/// checkpoints have about 200; each shard is one memory map, and the kernel limits those).
pub const MAX_SHARDS: usize = 4096;

/// The largest EP file (`--ep-file`) read, in bytes (1 MiB): a capability table is a few
/// hundred bytes.
pub const MAX_EP_FILE_BYTES: u64 = 1 << 20;

/// The longest EP name accepted, in characters.
pub const MAX_EP_NAME_LEN: usize = 64;

/// The largest tokenizer or other auxiliary file copied into a package, in bytes (1 GiB);
/// real tokenizers are a few MiB.
pub const MAX_AUX_FILE_BYTES: u64 = 1 << 30;

/// The hint that ends a limit error: how to raise the limit with `flag`.
fn raise_hint(flag: &str) -> String {
    format!(" (raise it with {flag})")
}

/// `message` without the hints to raise interpreter budgets, for commands that have no such
/// flags.
pub fn without_flag_hints(message: &str) -> String {
    message
        .replace(&raise_hint(TENSOR_ELEMENTS_FLAG), "")
        .replace(&raise_hint(RUN_MEMORY_FLAG), "")
        .replace(&raise_hint(LOOP_ITERATIONS_FLAG), "")
}

/// Bytes in a MiB, for messages.
const MIB: f64 = (1u64 << 20) as f64;

impl InterpLimits {
    /// The element count of `shape`, or an error naming `what` when its dimensions overflow
    /// (see [`numel`]) or it exceeds [`InterpLimits::max_tensor_elements`]. Call it before
    /// allocating a tensor of that shape.
    pub fn elements(&self, what: &str, shape: &[usize]) -> Result<usize> {
        match numel(shape) {
            Some(n) if n as u64 <= self.max_tensor_elements => Ok(n),
            Some(n) => Err(Error::Limit(format!(
                "{what}: shape {shape:?} has {n} elements, more than the limit of {} per tensor{}",
                self.max_tensor_elements,
                raise_hint(TENSOR_ELEMENTS_FLAG)
            ))),
            None => Err(Error::Limit(format!(
                "{what}: shape {shape:?} has dimensions whose product is over 2^64 elements, \
                 more than the limit of {} per tensor{}",
                self.max_tensor_elements,
                raise_hint(TENSOR_ELEMENTS_FLAG)
            ))),
        }
    }

    /// Checks that a `Loop` (`what` names it) may start iteration `done + 1` within
    /// [`InterpLimits::max_loop_iterations`].
    pub fn loop_iteration(&self, what: &str, done: u64) -> Result<()> {
        if done < self.max_loop_iterations {
            Ok(())
        } else {
            Err(Error::Limit(format!(
                "{what}: the loop ran {done} iterations, the most the interpreter runs (a loop \
                 needs a trip count or a condition that turns false){}",
                raise_hint(LOOP_ITERATIONS_FLAG)
            )))
        }
    }

    /// Checks that `bytes` held together stay within [`InterpLimits::max_run_bytes`]; `what`
    /// names the value whose arrival crossed the limit.
    pub fn run_bytes(&self, what: &str, bytes: u64) -> Result<()> {
        if bytes <= self.max_run_bytes {
            Ok(())
        } else {
            Err(Error::Limit(format!(
                "{what}: the run would hold {:.1} MiB of values, more than the limit of {:.1} MiB{}",
                bytes as f64 / MIB,
                self.max_run_bytes as f64 / MIB,
                raise_hint(RUN_MEMORY_FLAG)
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numel_refuses_overflowing_dimensions_even_with_a_zero() {
        assert_eq!(numel(&[]), Some(1));
        assert_eq!(numel(&[3, 4]), Some(12));
        assert_eq!(numel(&[3, 0, 4]), Some(0));
        assert_eq!(numel(&[usize::MAX, 2]), None);
        assert_eq!(numel(&[0, usize::MAX, 2]), None);
        assert_eq!(numel(&[usize::MAX, 2, 0]), None);
    }

    #[test]
    fn element_counts_are_checked_without_overflow() {
        let l = InterpLimits {
            max_tensor_elements: 100,
            max_run_bytes: 1000,
            ..InterpLimits::default()
        };
        assert_eq!(l.elements("x", &[10, 10]).unwrap(), 100);
        let e = l.elements("x", &[10, 11]).unwrap_err().to_string();
        assert!(
            e.contains("x: shape [10, 11] has 110 elements") && e.contains(TENSOR_ELEMENTS_FLAG)
        );
        let e = l.elements("y", &[usize::MAX, 4]).unwrap_err().to_string();
        assert!(e.contains("y: shape") && e.contains("over 2^64"), "{e}");
        // A zero dimension does not hide dimensions that overflow, whatever their order.
        for shape in [[0, 1 << 40, 1 << 40], [1 << 40, 1 << 40, 0]] {
            match l.elements("z", &shape) {
                Err(Error::Limit(e)) => {
                    assert!(
                        e.contains("over 2^64") && e.contains(TENSOR_ELEMENTS_FLAG),
                        "{e}"
                    )
                }
                other => panic!("{shape:?}: expected Error::Limit, got {other:?}"),
            }
        }
        assert_eq!(l.elements("z", &[0, 1 << 40]).unwrap(), 0);
        assert!(l.run_bytes("z", 1000).is_ok());
        assert!(l
            .run_bytes("z", 1001)
            .unwrap_err()
            .to_string()
            .contains(RUN_MEMORY_FLAG));
    }
}
