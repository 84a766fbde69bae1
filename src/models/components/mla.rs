//! Multi-head latent attention (MLA: DeepSeek-V2/V3, MiniCPM3) in its standard form: the
//! low-rank projections expanded into per-head q, k and v that opset-24 `Attention` (or, where
//! the optimizer fuses it, `GroupQueryAttention`) runs with a per-head KV cache.
//!
//! # The computation (as transformers computes it)
//!
//! ```text
//! q        = q_b_proj(RMSNorm_q(q_a_proj(x)))      (or q_proj(x) without q_lora_rank)
//!            per head: [q_nope (nope) | q_rope (rope)]
//! [c, k_r] = kv_a_proj_with_mqa(x)                 c: the latent (kv_lora_rank), k_r: rope
//! kv       = kv_b_proj(RMSNorm_kv(c))              per head: [k_nope (nope) | v (v_head_dim)]
//! k        = per head [k_nope | k_r]               (k_r shared by every head)
//! scores   = (q · k) · scale, RoPE on the rope channels of q and k only
//! ```
//!
//! LongCat-Flash scales the normalised latent before `kv_b_proj` ([`Mla::latent_scale`]).
//!
//! # Layout in the graph
//!
//! A dot product does not depend on the order of the channels as long as q and k share it, so
//! each head's channels are laid out **rope first**, `[rope | nope]`: the rows of `q_b_proj`
//! (`q_proj`) are reordered at save time, and k is `Concat(k_r expanded to every head,
//! k_nope)`. The rotation is then one `RotaryEmbedding` per q and k over the first `rope`
//! channels of each head (`rotary_embedding_dim`), the form the optimizer's attention rules
//! take in. `kv_a_proj_with_mqa` and `kv_b_proj` are cut by rows at save time into the latent
//! and `k_r` projections, and the `k_nope` and `v` projections, so no `Split` runs.
//!
//! # The KV cache
//!
//! Per layer, per head, the cache holds k (`qk_nope_head_dim + qk_rope_head_dim` channels,
//! rotated, rope channels first) and v. The decoder's cache has one head size for k and v (the
//! graph contract, onnxruntime-genai's `head_size`, GroupQueryAttention), so a narrower v
//! (DeepSeek: 128 of 192 channels) is stored widened to k's head size, its extra channels a
//! copy of the head's first (unrotated) k channels; each output channel of attention depends
//! on its own v channel alone, and the extra ones are sliced off before `o_proj`, so the
//! result is exact whatever they hold (a copy, unlike a zero `Pad`, runs on every EP the
//! decoder runs on and keeps every tensor's shape known to the optimizer). The widening costs
//! `(qk − v)/qk` of the value cache (a third for DeepSeek); the compressed-latent cache
//! transformers keeps (`kv_lora_rank + qk_rope_head_dim` per token, shared by the heads) is
//! not built here.

use super::{linear, rotary_embedding, scalar, Norm, NormKind, RopeTables};
use crate::config::Rope;
use crate::ir::{Attr, DType, GraphBuilder, Initializer, TensorSource};

/// The shape of one MLA block.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Mla {
    /// Width of the residual stream.
    pub hidden: usize,
    /// Attention heads (q, k and v alike).
    pub heads: usize,
    /// `q_lora_rank`: the width of q's low-rank projection (`None`: a plain `q_proj`).
    pub q_lora_rank: Option<usize>,
    /// `kv_lora_rank`: the width of the key/value latent.
    pub kv_lora_rank: usize,
    /// `qk_nope_head_dim`: q/k channels per head without rotation.
    pub qk_nope: usize,
    /// `qk_rope_head_dim`: rotated q/k channels per head.
    pub qk_rope: usize,
    /// `v_head_dim`: value channels per head (at most `qk_nope + qk_rope`).
    pub v_head: usize,
    /// `attention_bias`: biases on `q_a_proj`, `kv_a_proj_with_mqa` and `o_proj`.
    pub bias: bool,
    /// Epsilon of the latent RMSNorms (`q_a_layernorm`, `kv_a_layernorm`).
    pub latent_eps: f32,
    /// The attention softmax scale.
    pub scale: f32,
    /// A factor on the normalised key/value latent before `kv_b_proj` (LongCat-Flash's
    /// `mla_scale_kv_lora`, so on k's nope channels and on v); 1 (DeepSeek's) for none.
    pub latent_scale: f32,
}

impl Mla {
    /// q/k channels per head: `qk_nope + qk_rope`, also the cache's head size.
    pub fn head_dim(&self) -> usize {
        self.qk_nope + self.qk_rope
    }

    /// The q, k and v (3-D, `heads` heads of [`Mla::head_dim`] channels, v widened) of `x`
    /// in attention module `attn`, q and k rotated by `rope` with `tables`.
    pub fn qkv(
        &self,
        b: &mut GraphBuilder,
        x: &str,
        attn: &str,
        tables: &RopeTables,
        rope: &Rope,
        dtype: DType,
    ) -> [String; 3] {
        self.qkv_and_latent(b, x, attn, tables, rope, dtype).0
    }

    /// [`Mla::qkv`] and the normalised q latent (`q_a_layernorm(q_a_proj(x))`, `None` without
    /// `q_lora_rank`), which DeepSeek Sparse Attention's indexer reads too.
    pub fn qkv_and_latent(
        &self,
        b: &mut GraphBuilder,
        x: &str,
        attn: &str,
        tables: &RopeTables,
        rope: &Rope,
        dtype: DType,
    ) -> ([String; 3], Option<String>) {
        let (n, d) = (self.heads, self.head_dim());
        let norm = Norm {
            kind: NormKind::Rms,
            eps: self.latent_eps,
        };
        let (q, q_latent) = match self.q_lora_rank {
            Some(rank) => {
                let a = format!("{attn}.q_a_proj");
                let a = linear(b, x, &a, self.hidden, rank, self.bias, dtype);
                let a = norm.apply(b, &a, &format!("{attn}.q_a_layernorm"), rank, dtype);
                let q = self.rope_first(b, &a, &format!("{attn}.q_b_proj"), rank, dtype);
                (q, Some(a))
            }
            None => {
                let q_proj = format!("{attn}.q_proj");
                (self.rope_first(b, x, &q_proj, self.hidden, dtype), None)
            }
        };
        let q = rotary_embedding(b, &q, tables, rope, n, d);
        let [k, v] = self.kv(b, x, attn, tables, rope, dtype);
        ([q, k, v], q_latent)
    }

    /// The k and v of [`Mla::qkv`] alone (3-D, `heads` heads of [`Mla::head_dim`] channels, v
    /// widened, k rotated by `rope` with `tables`), for a family that projects q its own way.
    pub fn kv(
        &self,
        b: &mut GraphBuilder,
        x: &str,
        attn: &str,
        tables: &RopeTables,
        rope: &Rope,
        dtype: DType,
    ) -> [String; 2] {
        let (n, d, r) = (self.heads, self.head_dim(), self.qk_rope);
        let norm = Norm {
            kind: NormKind::Rms,
            eps: self.latent_eps,
        };
        let rank = self.kv_lora_rank;
        let kv_a = Projection {
            prefix: &format!("{attn}.kv_a_proj_with_mqa"),
            in_features: self.hidden,
            total: rank + r,
            bias: self.bias,
        };
        let latent = kv_a.rows(b, x, "latent", &[(0, rank)], dtype);
        let k_rope = kv_a.rows(b, x, "k_rope", &[(rank, r)], dtype);
        let latent = norm.apply(b, &latent, &format!("{attn}.kv_a_layernorm"), rank, dtype);
        let latent = match self.latent_scale {
            1.0 => latent,
            s => {
                let s = scalar(b, s, dtype);
                b.op("Mul", &[&latent, &s], vec![])
            }
        };
        let per_head = self.qk_nope + self.v_head;
        let kv_b = Projection {
            prefix: &format!("{attn}.kv_b_proj"),
            in_features: rank,
            total: n * per_head,
            bias: false,
        };
        let k_rows: Vec<_> = (0..n).map(|j| (j * per_head, self.qk_nope)).collect();
        let v_rows: Vec<_> = (0..n)
            .map(|j| (j * per_head + self.qk_nope, self.v_head))
            .collect();
        let k_nope = kv_b.rows(b, &latent, "k_nope", &k_rows, dtype);
        let v = kv_b.rows(b, &latent, "v", &v_rows, dtype);

        // k per head: [k_rope (shared) | k_nope], rotated as q is.
        let split = b.const_i64(&[0, 0, n as i64, -1]);
        let k_nope = b.op("Reshape", &[&k_nope, &split], vec![]);
        let axis = b.const_i64(&[2]);
        let k_rope = b.op("Unsqueeze", &[&k_rope, &axis], vec![]);
        let every_head = b.const_i64(&[1, 1, n as i64, r as i64]);
        let k_rope = b.op("Expand", &[&k_rope, &every_head], vec![]);
        let k4 = b.op("Concat", &[&k_rope, &k_nope], vec![("axis", Attr::Int(-1))]);
        let merge = b.const_i64(&[0, 0, (n * d) as i64]);
        let k = b.op("Reshape", &[&k4, &merge], vec![]);
        let k = rotary_embedding(b, &k, tables, rope, n, d);

        // v widened to k's head size by a copy of k's first channels: any values would do,
        // the attention output's extra channels being sliced off before o_proj.
        let v = match d - self.v_head {
            0 => v,
            extra => {
                let v = b.op("Reshape", &[&v, &split], vec![]);
                let (start, end) = (b.const_i64(&[0]), b.const_i64(&[extra as i64]));
                let last = b.const_i64(&[-1]);
                let filler = b.op("Slice", &[&k4, &start, &end, &last], vec![]);
                let v = b.op("Concat", &[&v, &filler], vec![("axis", Attr::Int(-1))]);
                b.op("Reshape", &[&v, &merge], vec![])
            }
        };
        [k, v]
    }

    /// The output projection (`{attn}.o_proj`) of the attention result `y` (3-D, heads of
    /// [`Mla::head_dim`] channels): each head's first `v_head` channels, the widening sliced
    /// off.
    pub fn output(&self, b: &mut GraphBuilder, y: &str, attn: &str, dtype: DType) -> String {
        let y = self.values(b, y);
        let o_proj = format!("{attn}.o_proj");
        let (n, v) = (self.heads, self.v_head);
        linear(b, &y, &o_proj, n * v, self.hidden, self.bias, dtype)
    }

    /// The attention result `y` (3-D, heads of [`Mla::head_dim`] channels) cut to each head's
    /// first `v_head` channels (the widening sliced off): what `o_proj` reads.
    pub fn values(&self, b: &mut GraphBuilder, y: &str) -> String {
        let (n, v) = (self.heads, self.v_head);
        if v == self.head_dim() {
            y.to_string()
        } else {
            let split = b.const_i64(&[0, 0, n as i64, -1]);
            let y = b.op("Reshape", &[y, &split], vec![]);
            let (start, end, axis) = (
                b.const_i64(&[0]),
                b.const_i64(&[v as i64]),
                b.const_i64(&[-1]),
            );
            let y = b.op("Slice", &[&y, &start, &end, &axis], vec![]);
            let merge = b.const_i64(&[0, 0, (n * v) as i64]);
            b.op("Reshape", &[&y, &merge], vec![])
        }
    }

    /// The q projection `{prefix}` of `x` (`in_features` wide) with each head's channels
    /// reordered `[rope | nope]` (the checkpoint's rows are `[nope | rope]` per head).
    fn rope_first(
        &self,
        b: &mut GraphBuilder,
        x: &str,
        prefix: &str,
        in_features: usize,
        dtype: DType,
    ) -> String {
        self.strided_q(b, x, (prefix, in_features), self.head_dim(), dtype)
    }

    /// The q of projection `prefix` (`in_features` wide, no bias) of `x` whose heads are
    /// `stride` rows apart, each starting with its `[nope | rope]` q rows (A.X-K2's `q_gate_proj`
    /// follows them with the head's gate rows): each head's q channels reordered `[rope |
    /// nope]` as [`Mla::qkv`] lays them out, unrotated.
    pub fn strided_q(
        &self,
        b: &mut GraphBuilder,
        x: &str,
        (prefix, in_features): (&str, usize),
        stride: usize,
        dtype: DType,
    ) -> String {
        let nope = self.qk_nope;
        let order: Vec<_> = (0..self.heads)
            .flat_map(|j| [(j * stride + nope, self.qk_rope), (j * stride, nope)])
            .collect();
        let q = Projection {
            prefix,
            in_features,
            total: self.heads * stride,
            bias: false,
        };
        q.rows(b, x, "rope_first", &order, dtype)
    }

    /// The rows `blocks` (`(start, len)` each, in order) of projection `prefix` (`in_features`
    /// wide, `total` rows, no bias) applied to `x`, its weight stored as
    /// `{prefix}.{part}.weight_t`.
    pub fn projection_rows(
        b: &mut GraphBuilder,
        x: &str,
        (prefix, in_features, total): (&str, usize, usize),
        part: &str,
        blocks: &[(usize, usize)],
        dtype: DType,
    ) -> String {
        let p = Projection {
            prefix,
            in_features,
            total,
            bias: false,
        };
        p.rows(b, x, part, blocks, dtype)
    }
}

/// A checkpoint projection `{prefix}.weight` (`[total, in_features]`, HF `[out, in]`), with
/// `{prefix}.bias` when `bias`.
struct Projection<'a> {
    prefix: &'a str,
    in_features: usize,
    total: usize,
    bias: bool,
}

impl Projection<'_> {
    /// `x @ Wᵀ (+ b)` with `W` the rows `blocks` (`(start, len)` each, in order) of the
    /// weight, stored transposed as `{prefix}.{part}.weight_t` (and the same entries of the
    /// bias as `{prefix}.{part}.bias`).
    fn rows(
        &self,
        b: &mut GraphBuilder,
        x: &str,
        part: &str,
        blocks: &[(usize, usize)],
        dtype: DType,
    ) -> String {
        let (prefix, total) = (self.prefix, self.total);
        let out: usize = blocks.iter().map(|(_, len)| len).sum();
        let cut = |tensor: &str| TensorSource::Concat {
            parts: blocks
                .iter()
                .map(|&(start, len)| TensorSource::Slice {
                    source: Box::new(TensorSource::Checkpoint(format!("{prefix}.{tensor}"))),
                    axis: 0,
                    start,
                    len,
                    total,
                })
                .collect(),
            axis: 0,
        };
        let w = b.initializer(Initializer {
            name: format!("{prefix}.{part}.weight_t"),
            dtype,
            shape: vec![self.in_features, out],
            source: Some(TensorSource::Transpose(Box::new(cut("weight")))),
        });
        let y = b.op("MatMul", &[x, &w], vec![]);
        if !self.bias {
            return y;
        }
        let bias = b.initializer(Initializer {
            name: format!("{prefix}.{part}.bias"),
            dtype,
            shape: vec![out],
            source: Some(cut("bias")),
        });
        b.op("Add", &[&y, &bias], vec![])
    }
}
