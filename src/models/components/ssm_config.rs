//! The checks every Mamba2 mixer's config must pass, whatever the family calls its fields:
//! one place for what bamba (and granitemoehybrid), zamba2, falcon_h1, nemotron_h and mamba2
//! each read under their own names and defaults.

use serde_json::Value;

use crate::config::Fields;
use crate::limits::config::MAX_WIDTH;
use crate::Result;

/// How a config names the Mamba2 mixer's sizes (the fields errors name), and how it spells the
/// mixer's width (`heads · head_dim`) in the in_proj message.
pub struct Mamba2Fields<'a> {
    /// The conv kernel's field (`conv_kernel`, `mamba_d_conv`).
    pub kernel: &'a str,
    /// The SSM heads' field.
    pub heads: &'a str,
    /// The groups' field.
    pub groups: &'a str,
    /// The state size's field.
    pub state: &'a str,
    /// The mixer's width as the config spells it (`mamba_expand·hidden_size`, `mamba_d_ssm`).
    pub width: &'a str,
}

/// The sizes of a Mamba2 mixer read from a config.
pub struct Mamba2Sizes {
    /// Conv kernel width.
    pub kernel: usize,
    /// SSM heads.
    pub heads: usize,
    /// Groups sharing B and C.
    pub groups: usize,
    /// State size per head and channel.
    pub state: usize,
    /// The mixer's width, `heads · head_dim`.
    pub width: u64,
}

impl Mamba2Sizes {
    /// Refuses, naming the field, a conv kernel under 2 (its state holds `kernel − 1` steps),
    /// groups that do not divide the heads, and an in_proj (the gate, the convolved x/B/C
    /// channels and the time steps: `2·width + 2·groups·state + heads` outputs) wider than
    /// [`MAX_WIDTH`].
    pub fn check(&self, f: &Fields<'_>, names: &Mamba2Fields<'_>) -> Result<()> {
        if self.kernel < 2 {
            return Err(f.err(
                names.kernel,
                &format!(
                    "must be at least 2 (the conv state holds {} − 1 steps)",
                    names.kernel
                ),
            ));
        }
        if self.heads % self.groups != 0 {
            return Err(f.err(
                names.groups,
                &format!(
                    "{} must divide {} ({})",
                    self.groups, names.heads, self.heads
                ),
            ));
        }
        let proj = 2 * self.width + 2 * self.groups as u64 * self.state as u64 + self.heads as u64;
        if proj > MAX_WIDTH as u64 {
            return Err(f.err(
                names.state,
                &format!(
                    "gives an in_proj of {proj} outputs (2·{} + 2·{}·{} + {}; at most {MAX_WIDTH})",
                    names.width, names.groups, names.state, names.heads
                ),
            ));
        }
        Ok(())
    }
}

/// Whether `v` is +∞ as config.json spells it: `Infinity` (Python's json module; read as the
/// string, [`crate::config::HfConfig::parse`]) or `{"__float__": "Infinity"}` (transformers 5's
/// writer).
fn is_infinity(v: &Value) -> bool {
    let v = v.get("__float__").unwrap_or(v);
    v.as_str() == Some("Infinity")
}

/// `time_step_limit` must be its default `[0.0, Infinity]` (the clamp transformers applies to
/// the time steps of its chunked prefill only; with the default the clamp never acts, as
/// softplus is positive): anything else is refused by name.
pub fn time_step_limit(limit: Option<&Value>, f: &Fields<'_>) -> Result<()> {
    let default = match limit {
        None | Some(Value::Null) => true,
        Some(Value::Array(pair)) => match pair.as_slice() {
            [low, high] => low.as_f64() == Some(0.0) && is_infinity(high),
            _ => false,
        },
        Some(_) => false,
    };
    if default {
        return Ok(());
    }
    Err(f.err(
        "time_step_limit",
        &format!(
            "{} is not supported (mobius builds the default [0.0, Infinity], no clamp)",
            limit.map(Value::to_string).unwrap_or_default()
        ),
    ))
}
