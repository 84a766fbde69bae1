//! Phi-3 / Phi-3.5: the Llama decoder with a fused `qkv_proj` weight and a fused
//! `gate_up_proj` weight (gate half first), both split into row blocks at save time (lazily,
//! no copy of the checkpoint), so the graph is the plain decoder's; and LongRoPE (see
//! [`super::components::longrope`]).

use super::components::longrope::longrope_tables;
use super::components::{linear, DecoderInputs, RopeTables};
use super::decoder::{self, Family};
use super::family::FamilySpec;
use crate::config::ModelType;
use crate::config::{read_decoder, ArchConfig, Biases, DecoderFields, RopeScaling};
use crate::ir::{DType, GraphBuilder, Initializer, TensorSource};

/// The family's registry entry.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "phi3",
    summary: "fused `qkv_proj`/`gate_up_proj` split at save time, LongRoPE",
    model_types: &[ModelType::generative("phi3", "phi3", |raw, t, f| {
        read_decoder(raw, t, f, &FIELDS, |_| Ok(Phi3))
    })
    .building_longrope()],
};

/// No biases, `rms_norm_eps` 1e-5 by default (Phi3Config's).
const FIELDS: DecoderFields = DecoderFields {
    biases: Biases::None,
    rms_norm_eps: 1e-5,
    ..DecoderFields::LLAMA
};

/// Phi-3's hooks: fused projections and LongRoPE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Phi3;

impl Family for Phi3 {
    fn rotary(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        io: &DecoderInputs,
        dtype: DType,
    ) -> Vec<RopeTables> {
        let RopeScaling::LongRope(l) = &cfg.rope.scaling else {
            return vec![decoder::plain_rotary(b, cfg, io, dtype)];
        };
        let positions = cfg.max_position_embeddings;
        vec![longrope_tables(
            b,
            &cfg.rope,
            l,
            positions,
            &io.position_ids,
            dtype,
        )]
    }

    fn qkv(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        attn: &str,
        dtype: DType,
    ) -> [String; 3] {
        let (q, kv) = (cfg.q_size(), cfg.kv_size());
        let fused = Fused {
            weight: format!("{attn}.qkv_proj.weight"),
            rows: q + 2 * kv,
            in_features: cfg.hidden_size,
        };
        [
            fused.block(b, x, &format!("{attn}.q_proj"), 0, q, dtype),
            fused.block(b, x, &format!("{attn}.k_proj"), q, kv, dtype),
            fused.block(b, x, &format!("{attn}.v_proj"), q + kv, kv, dtype),
        ]
    }

    fn mlp(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        mlp: &str,
        dtype: DType,
    ) -> String {
        let (h, i) = (cfg.hidden_size, cfg.intermediate_size);
        let fused = Fused {
            weight: format!("{mlp}.gate_up_proj.weight"),
            rows: 2 * i,
            in_features: h,
        };
        let gate = fused.block(b, x, &format!("{mlp}.gate_proj"), 0, i, dtype);
        let up = fused.block(b, x, &format!("{mlp}.up_proj"), i, i, dtype);
        let sig = b.op("Sigmoid", &[&gate], vec![]);
        let silu = b.op("Mul", &[&gate, &sig], vec![]);
        let prod = b.op("Mul", &[&silu, &up], vec![]);
        linear(b, &prod, &format!("{mlp}.down_proj"), i, h, false, dtype)
    }
}

/// A fused `[rows, in_features]` checkpoint weight whose row blocks are separate projections.
pub struct Fused {
    /// The checkpoint tensor's name.
    pub weight: String,
    /// Its rows (every projection's outputs together).
    pub rows: usize,
    /// Its columns (the input width).
    pub in_features: usize,
}

impl Fused {
    /// `x @ W[start..start + len]ᵀ`, the block stored as `{name}.weight_t` (sliced and
    /// transposed at save time).
    pub fn block(
        &self,
        b: &mut GraphBuilder,
        x: &str,
        name: &str,
        start: usize,
        len: usize,
        dtype: DType,
    ) -> String {
        let rows = TensorSource::Slice {
            source: Box::new(TensorSource::Checkpoint(self.weight.clone())),
            axis: 0,
            start,
            len,
            total: self.rows,
        };
        let w = b.initializer(Initializer {
            name: format!("{name}.weight_t"),
            dtype,
            shape: vec![self.in_features, len],
            source: Some(TensorSource::Transpose(Box::new(rows))),
        });
        b.op("MatMul", &[x, &w], vec![])
    }
}
