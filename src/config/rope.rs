//! Rotary position embedding parameters and cos/sin tables, computed in f32 the way
//! transformers computes them.

use std::f32::consts::PI;

/// How the RoPE inverse frequencies are scaled (`rope_type`).
#[derive(Debug, Clone, PartialEq)]
pub enum RopeScaling {
    /// Plain RoPE.
    Default,
    /// Position interpolation: every inverse frequency divided by `factor`.
    Linear {
        /// The interpolation factor.
        factor: f32,
    },
    /// Llama 3.1 wavelength-band smoothing.
    Llama3 {
        /// Scale factor for low frequencies.
        factor: f32,
        /// Low-frequency band edge factor.
        low_freq_factor: f32,
        /// High-frequency band edge factor.
        high_freq_factor: f32,
        /// Context length the model was pre-trained with.
        original_max_position_embeddings: f32,
    },
    /// Phi-3 LongRoPE (`longrope`, alias `su`): per-frequency divisors, the short set up to
    /// `original_max_position_embeddings` positions and the long set beyond, with cos/sin
    /// scaled by `attention_factor` (see [`super::longrope`]).
    LongRope(super::longrope::LongRope),
    /// YaRN: frequencies blended between plain and `factor`-divided over a ramp of channel
    /// pairs, cos/sin scaled by an attention factor (see [`super::yarn`]).
    Yarn(super::yarn::Yarn),
    /// Dynamic NTK (`dynamic`): a forward pass whose length `L = max(position_ids) + 1` exceeds
    /// the original context uses the base `theta · (factor·L/original − (factor − 1))^(d/(d−2))`
    /// (`d` the rotary width); shorter passes use `theta`. The builder computes the tables in
    /// the graph from each pass's length (see `crate::models::components::dynamic_rope`).
    Dynamic {
        /// The NTK factor.
        factor: f32,
        /// The context the model was trained with: transformers takes `max_position_embeddings`.
        original: usize,
    },
}

/// RoPE as the model uses it.
#[derive(Debug, Clone, PartialEq)]
pub struct Rope {
    /// Base of the inverse frequencies (`rope_theta`).
    pub theta: f32,
    /// Scaling applied to the inverse frequencies.
    pub scaling: RopeScaling,
    /// Number of leading channels of each head that are rotated (even, ≤ head_dim).
    pub rotary_dim: usize,
    /// Whether rotated pairs are interleaved (x0,x1),(x2,x3) instead of split halves.
    pub interleaved: bool,
}

impl Rope {
    /// The multiplier of every cos/sin value (YaRN's attention factor; 1 for the others,
    /// LongRoPE's being applied with its table switch).
    pub fn cos_sin_scale(&self) -> f32 {
        match &self.scaling {
            RopeScaling::Yarn(y) => y.attention_factor,
            _ => 1.0,
        }
    }

    /// The number of positions a model with this RoPE runs: `max_position_embeddings`
    /// (`max_positions`), or for dynamic NTK the length its scaling is meant for, ⌈factor ×
    /// the original context⌉ (at least the original context).
    pub fn context_length(&self, max_positions: usize) -> usize {
        match &self.scaling {
            RopeScaling::Dynamic { factor, original } => {
                let scaled = (f64::from(*factor) * *original as f64).ceil();
                max_positions.max(scaled as usize)
            }
            _ => max_positions,
        }
    }

    /// The inverse frequencies, `rotary_dim / 2` of them, scaled (for dynamic NTK: those of
    /// passes that fit the original context).
    pub fn inv_freq(&self) -> Vec<f32> {
        let dim = self.rotary_dim as f32;
        let base: Vec<f32> = (0..self.rotary_dim / 2)
            .map(|j| 1.0 / self.theta.powf((2 * j) as f32 / dim))
            .collect();
        match &self.scaling {
            RopeScaling::Default | RopeScaling::Dynamic { .. } => base,
            RopeScaling::Yarn(y) => y.inv_freq(self.theta, self.rotary_dim),
            RopeScaling::Linear { factor } => base.iter().map(|f| f / factor).collect(),
            RopeScaling::LongRope(l) => l.inv_freq(self.theta, self.rotary_dim, false),
            RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings: old,
            } => {
                let low_wavelen = old / low_freq_factor;
                let high_wavelen = old / high_freq_factor;
                base.iter()
                    .map(|&f| {
                        let wavelen = 2.0 * PI / f;
                        let scaled = if wavelen > low_wavelen { f / factor } else { f };
                        let medium = wavelen >= high_wavelen && wavelen <= low_wavelen;
                        if medium {
                            let smooth = (old / wavelen - low_freq_factor)
                                / (high_freq_factor - low_freq_factor);
                            (1.0 - smooth) * scaled / factor + smooth * scaled
                        } else {
                            scaled
                        }
                    })
                    .collect()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rope(scaling: RopeScaling) -> Rope {
        Rope {
            theta: 500000.0,
            scaling,
            rotary_dim: 64,
            interleaved: false,
        }
    }

    #[test]
    fn default_inv_freq_starts_at_one_and_decreases() {
        let f = rope(RopeScaling::Default).inv_freq();
        assert_eq!(f.len(), 32);
        assert_eq!(f[0], 1.0);
        assert!(f.windows(2).all(|w| w[1] < w[0]));
    }

    #[test]
    fn llama3_keeps_high_frequencies_and_divides_low_ones() {
        let base = rope(RopeScaling::Default).inv_freq();
        let scaled = rope(RopeScaling::Llama3 {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 8192.0,
        })
        .inv_freq();
        assert_eq!(scaled[0], base[0], "highest frequency is untouched");
        let last = base.len() - 1;
        assert!((scaled[last] - base[last] / 8.0).abs() <= base[last] * 1e-6);
    }

    #[test]
    fn linear_scaling_divides_every_frequency() {
        let base = rope(RopeScaling::Default).inv_freq();
        let scaled = rope(RopeScaling::Linear { factor: 2.0 }).inv_freq();
        assert!(base.iter().zip(&scaled).all(|(b, s)| *s == b / 2.0));
    }
}
