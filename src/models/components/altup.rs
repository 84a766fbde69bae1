//! AltUp and LAuReL (Gemma 3n). AltUp ("alternating updates") carries several hidden-state
//! streams through the decoder, `[B, S, streams, H]` here: each layer predicts every stream as
//! a routed mix of all of them, computes on the active one alone, and corrects the predictions
//! by how far its output moved the active one. LAuReL ("learned augmented residual") adds a
//! normed low-rank projection of a layer's input to it.

use super::{linear, rms_norm, scalar, Norm};
use crate::ir::{Attr, DType, GraphBuilder, TensorData};

/// The AltUp streams' shape and their routers' norm.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AltUp {
    /// `altup_num_inputs`: the streams.
    pub streams: usize,
    /// `altup_active_idx`: the stream the layers compute on.
    pub active: usize,
    /// The hidden size.
    pub hidden: usize,
    /// The epsilon of the routers' RMSNorm (`router_norm`).
    pub eps: f32,
}

/// `sqrt(max(mean(x²), floor))` over the last axis (`floor` `None`: no clamp), keeping it.
fn magnitude(b: &mut GraphBuilder, x: &str, floor: Option<f32>, dtype: DType) -> String {
    let square = b.op("Mul", &[x, x], vec![]);
    let last = b.const_i64(&[-1]);
    let mean = b.op(
        "ReduceMean",
        &[&square, &last],
        vec![("keepdims", Attr::Int(1))],
    );
    let mean = match floor {
        Some(floor) => {
            let floor = scalar(b, floor, dtype);
            b.op("Max", &[&mean, &floor], vec![])
        }
        None => mean,
    };
    b.op("Sqrt", &[&mean], vec![])
}

impl AltUp {
    /// Stream `k` of `streams`, `[B, S, H]`.
    pub fn stream(&self, b: &mut GraphBuilder, streams: &str, k: usize) -> String {
        let index = b.scalar_i64(k as i64);
        b.op("Gather", &[streams, &index], vec![("axis", Attr::Int(2))])
    }

    /// `parts` (each `[B, S, H]`) stacked on axis 2.
    fn stack(b: &mut GraphBuilder, parts: &[String]) -> String {
        let axis = b.const_i64(&[2]);
        let lifted: Vec<String> = parts
            .iter()
            .map(|p| b.op("Unsqueeze", &[p, &axis], vec![]))
            .collect();
        let lifted: Vec<&str> = lifted.iter().map(String::as_str).collect();
        b.op("Concat", &lifted, vec![("axis", Attr::Int(2))])
    }

    /// `x` and, for each further stream `k`, `x`'s projection `{module}.{k - 1}` rescaled to
    /// `x`'s RMS magnitude (`projections` true) — the streams from the embeddings — or, with
    /// `projections` false, stream 0 and each further stream's projection rescaled to stream
    /// 0's magnitude, averaged — the hidden state from the streams.
    fn project(
        &self,
        b: &mut GraphBuilder,
        x: &str,
        module: &str,
        expand: bool,
        dtype: DType,
    ) -> String {
        let h = self.hidden;
        let first = match expand {
            true => x.to_string(),
            false => self.stream(b, x, 0),
        };
        let target = magnitude(b, &first, None, dtype);
        let mut parts = vec![first.clone()];
        for k in 1..self.streams {
            let input = match expand {
                true => first.clone(),
                false => self.stream(b, x, k),
            };
            let projected = linear(
                b,
                &input,
                &format!("{module}.{}", k - 1),
                h,
                h,
                false,
                dtype,
            );
            let own = magnitude(b, &projected, Some(1e-5), dtype);
            let scaled = b.op("Mul", &[&projected, &target], vec![]);
            parts.push(b.op("Div", &[&scaled, &own], vec![]));
        }
        let stacked = Self::stack(b, &parts);
        if expand {
            return stacked;
        }
        let axis = b.const_i64(&[2]);
        b.op(
            "ReduceMean",
            &[&stacked, &axis],
            vec![("keepdims", Attr::Int(0))],
        )
    }

    /// The streams `[B, S, streams, H]` from the embeddings `x`: `x`, then its projections
    /// `{module}.{k}` (`model.altup_projections`) rescaled to `x`'s RMS magnitude.
    pub fn expand(&self, b: &mut GraphBuilder, x: &str, module: &str, dtype: DType) -> String {
        self.project(b, x, module, true, dtype)
    }

    /// The hidden state `[B, S, H]` from the streams: the mean of stream 0 and the other
    /// streams' projections `{module}.{k}` (`model.altup_unembed_projections`) rescaled to
    /// stream 0's RMS magnitude.
    pub fn collapse(
        &self,
        b: &mut GraphBuilder,
        streams: &str,
        module: &str,
        dtype: DType,
    ) -> String {
        self.project(b, streams, module, false, dtype)
    }

    /// The router's modalities of `x`: `tanh(modality_router(router_norm(x) / H))`,
    /// `[B, S, streams]` (`module`: the layer's `altup`); `declare`: the router's weights are
    /// declared here, else (the second routing of a layer) read by their names.
    fn route(
        &self,
        b: &mut GraphBuilder,
        x: &str,
        module: &str,
        declare: bool,
        dtype: DType,
    ) -> String {
        let (h, n) = (self.hidden, self.streams);
        let gain = format!("{module}.router_norm.weight");
        let normed = match declare {
            true => rms_norm(b, x, &gain, h, self.eps, dtype),
            false => b.op(
                "RMSNormalization",
                &[x, &gain],
                vec![("axis", Attr::Int(-1)), ("epsilon", Attr::Float(self.eps))],
            ),
        };
        let scale = scalar(b, (h as f64).recip() as f32, dtype);
        let scaled = b.op("Mul", &[&normed, &scale], vec![]);
        let router = format!("{module}.modality_router");
        let routed = match declare {
            true => linear(b, &scaled, &router, h, n, false, dtype),
            false => b.op("MatMul", &[&scaled, &format!("{router}.weight_t")], vec![]),
        };
        b.op("Tanh", &[&routed], vec![])
    }

    /// The layer's predictions of the `streams` (AltUp module `module`): each stream plus a
    /// mix of all of them, `pred_i = s_i + Σ_j P_ij · s_j`, with `P` the `[streams, streams]`
    /// `prediction_coefs` of the active stream's modalities.
    pub fn predict(
        &self,
        b: &mut GraphBuilder,
        streams: &str,
        module: &str,
        dtype: DType,
    ) -> String {
        let n = self.streams;
        let active = self.stream(b, streams, self.active);
        let modalities = self.route(b, &active, module, true, dtype);
        let coefs = format!("{module}.prediction_coefs");
        let coefs = linear(b, &modalities, &coefs, n, n * n, false, dtype);
        let square = b.const_i64(&[0, 0, n as i64, n as i64]);
        let coefs = b.op("Reshape", &[&coefs, &square], vec![]);
        let mixed = b.op("MatMul", &[&coefs, streams], vec![]);
        b.op("Add", &[&mixed, streams], vec![])
    }

    /// The `predictions` corrected by the layer's output `activated` (`[B, S, H]`), after
    /// [`AltUp::predict`] of the same `module` (whose router weights it reuses):
    /// `pred_i + (activated − pred_active) · (1 + c_i)`, with `c` the `correction_coefs` of
    /// `activated`'s modalities.
    pub fn correct(
        &self,
        b: &mut GraphBuilder,
        predictions: &str,
        activated: &str,
        module: &str,
        dtype: DType,
    ) -> String {
        let n = self.streams;
        let modalities = self.route(b, activated, module, false, dtype);
        let active = self.stream(b, predictions, self.active);
        let innovation = b.op("Sub", &[activated, &active], vec![]);
        let coefs = format!("{module}.correction_coefs");
        let coefs = linear(b, &modalities, &coefs, n, n, false, dtype);
        let one = scalar(b, 1.0, dtype);
        let coefs = b.op("Add", &[&coefs, &one], vec![]);
        let (last, stream_axis) = (b.const_i64(&[-1]), b.const_i64(&[2]));
        let coefs = b.op("Unsqueeze", &[&coefs, &last], vec![]);
        let innovation = b.op("Unsqueeze", &[&innovation, &stream_axis], vec![]);
        let corrected = b.op("Mul", &[&innovation, &coefs], vec![]);
        b.op("Add", &[&corrected, predictions], vec![])
    }

    /// `streams` with `y` (`[B, S, H]`) added to every stream but the first.
    pub fn add_to_others(
        &self,
        b: &mut GraphBuilder,
        streams: &str,
        y: &str,
        dtype: DType,
    ) -> String {
        let mut bytes = Vec::new();
        for k in 0..self.streams {
            let one = f32::from(u8::from(k > 0)).to_le_bytes();
            crate::weights::convert::convert_into(&one, DType::F32, dtype, &mut bytes);
        }
        let mask = b.constant(TensorData {
            dtype,
            shape: vec![self.streams, 1],
            bytes,
        });
        let axis = b.const_i64(&[2]);
        let y = b.op("Unsqueeze", &[y, &axis], vec![]);
        let masked = b.op("Mul", &[&y, &mask], vec![]);
        b.op("Add", &[streams, &masked], vec![])
    }
}

/// LAuReL of `x` (module `module`, `laurel`): `x + post_laurel_norm(linear_right(
/// linear_left(x)))`, through `rank` channels.
pub fn laurel(
    b: &mut GraphBuilder,
    x: &str,
    module: &str,
    (hidden, rank): (usize, usize),
    norm: Norm,
    dtype: DType,
) -> String {
    let left = linear(
        b,
        x,
        &format!("{module}.linear_left"),
        hidden,
        rank,
        false,
        dtype,
    );
    let right = format!("{module}.linear_right");
    let right = linear(b, &left, &right, rank, hidden, false, dtype);
    let module = format!("{module}.post_laurel_norm");
    let normed = norm.apply(b, &right, &module, hidden, dtype);
    b.op("Add", &[x, &normed], vec![])
}
