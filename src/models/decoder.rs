//! The decoder skeleton shared by every decoder family: graph I/O ([`hybrid_decoder_io`]) →
//! token embedding → layers of attention (RoPE) and an MLP with residual adds → final norm →
//! LM head. Each family changes only what its [`Family`] hooks say; every default is Llama's
//! (pre-norm RMSNorm layers, SiLU-gated MLP, `model.*` checkpoint names). A layer for which
//! [`Family::short_conv`] names a convolution mixes its tokens with the gated short
//! convolution of [`gated_short_conv`] instead of attention, and carries that convolution's
//! state in place of a KV cache ([`LayerCache`]); a layer for which [`Family::ssm_mixer`]
//! names a Mamba2, Mamba or Gated DeltaNet mixer mixes its tokens with it ([`mamba2_mixer`], [`mamba_mixer`] or [`gated_delta_mixer`]
//! of module `{layer}.{ssm_module}`) and carries its conv and SSM states; the layer is that
//! mixer and the residual add alone (Mamba2, Mamba), or goes on to the MLP block as an
//! attention layer does (the hybrids, [`Family::ssm_with_mlp`]). A layer for which
//! [`Family::mixes_tokens`] is false is its MLP block alone and carries nothing
//! ([`LayerCache::Stateless`]); an attention layer is its attention and the residual add alone
//! where [`Family::attention_with_mlp`] is false (Nemotron-H: one mixer per block). A layer for
//! which [`Family::layer_indexer`] names a learned indexer (DeepSeek Sparse Attention) attends
//! through the index mask its family's [`Family::attention_qkv`] writes, or through an earlier
//! layer's, and carries the indexer's key cache beside its KV cache ([`LayerCache::Indexed`]).

use std::collections::BTreeMap;
use std::fmt::Debug;

use super::components::{
    alibi_bias, causal_mask, chunked_mask, gated_delta_mixer, gated_mlp, gated_short_conv,
    hybrid_decoder_io, index_mask_name, linear, mamba2_mixer, mamba_mixer, named_rope_tables,
    padding_mask, per_head_norm, present_conv_name, present_index_key_name, present_ssm_name,
    rope_tables, rotary_embedding, scalar, sliding_window_mask, soft_capped_attention,
    AttentionSpec, ConvState, DecoderDims, DecoderInputs, GateActivation, IndexIo, IndexedLayer,
    LayerCache, LayerPast, Norm, NormKind, RopeTables, ShortConv, SsmMixer, SsmState,
};
use crate::config::{ArchConfig, CheckpointRenaming, FamilyKnobs, Rope};
use crate::ir::{Attr, DType, Graph, GraphBuilder, Initializer, TensorSource};

/// Checkpoint module names of the decoder's parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Names {
    /// The model module (`model`): embeddings, mask scope, layers and final norm live in it.
    pub root: &'static str,
    /// The token embedding module (`embed_tokens`), its table `{root}.{embed}.weight`.
    pub embed: &'static str,
    /// The layer list (`layers`): layer `i` is `{root}.{layers}.{i}`.
    pub layers: &'static str,
    /// The attention module of a layer (`self_attn`).
    pub attn: &'static str,
    /// The attention's output projection (`o_proj`): `{attn}.{o_proj}`.
    pub o_proj: &'static str,
    /// The final norm module (`norm`).
    pub final_norm: &'static str,
}

impl Names {
    /// Llama's names (`model.embed_tokens`, `model.layers.{i}.self_attn`, `model.norm`).
    pub const LLAMA: Names = Names {
        root: "model",
        embed: "embed_tokens",
        layers: "layers",
        attn: "self_attn",
        o_proj: "o_proj",
        final_norm: "norm",
    };
}

/// The norm modules of a layer (names inside the layer), `None` where there is none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayerNorms {
    /// On the attention input.
    pub pre_attention: Option<&'static str>,
    /// On the attention output, before its residual add.
    pub post_attention: Option<&'static str>,
    /// On the MLP input.
    pub pre_mlp: Option<&'static str>,
    /// On the MLP output, before its residual add.
    pub post_mlp: Option<&'static str>,
}

impl LayerNorms {
    /// Pre-norm layers (Llama): `x + f(norm(x))`.
    pub const PRE: LayerNorms = LayerNorms {
        pre_attention: Some("input_layernorm"),
        post_attention: None,
        pre_mlp: Some("post_attention_layernorm"),
        post_mlp: None,
    };
    /// Post-norm layers (OLMo 2): `x + norm(f(x))`.
    pub const POST: LayerNorms = LayerNorms {
        pre_attention: None,
        post_attention: Some("post_attention_layernorm"),
        pre_mlp: None,
        post_mlp: Some("post_feedforward_layernorm"),
    };
    /// Sandwich norms (Gemma 2/3): `x + norm(f(norm(x)))`.
    pub const SANDWICH: LayerNorms = LayerNorms {
        pre_attention: Some("input_layernorm"),
        post_attention: Some("post_attention_layernorm"),
        pre_mlp: Some("pre_feedforward_layernorm"),
        post_mlp: Some("post_feedforward_layernorm"),
    };
}

/// How a family normalises the projected q and k before RoPE: the [`Family::norm`] of modules
/// `{attn}.q_norm` and `{attn}.k_norm`, or none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QkNorm {
    /// No q/k norm (Llama).
    Off,
    /// Each head over its `head_dim` channels with one `[head_dim]` weight shared by the heads
    /// (Qwen3): `Reshape [0, 0, -1, D]` → norm → `Reshape [0, 0, -1]`.
    PerHead,
    /// [`QkNorm::PerHead`] with the head counts written into the splitting Reshape
    /// (`[0, 0, heads, D]`, Gemma 3).
    PerHeadCounted,
    /// Over the whole projection width, one weight per channel of q (k) (OLMo 2).
    FullWidth,
}

impl QkNorm {
    /// `q` and `k` of attention module `attn` normalised with `norm` in this form.
    #[allow(clippy::too_many_arguments)]
    pub fn apply(
        self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        norm: Norm,
        q: String,
        k: String,
        attn: &str,
        dtype: DType,
    ) -> (String, String) {
        let (q_norm, k_norm) = (format!("{attn}.q_norm"), format!("{attn}.k_norm"));
        let d = cfg.head_dim;
        let per_head = |b: &mut GraphBuilder, heads: [i64; 2]| {
            (
                per_head_norm(b, norm, &q, &q_norm, heads[0], d, dtype),
                per_head_norm(b, norm, &k, &k_norm, heads[1], d, dtype),
            )
        };
        match self {
            QkNorm::Off => (q, k),
            QkNorm::PerHead => per_head(b, [-1, -1]),
            QkNorm::PerHeadCounted => {
                let heads = [cfg.num_attention_heads, cfg.num_key_value_heads];
                per_head(b, heads.map(|h| h as i64))
            }
            QkNorm::FullWidth => (
                norm.apply(b, &q, &q_norm, cfg.q_size(), dtype),
                norm.apply(b, &k, &k_norm, cfg.kv_size(), dtype),
            ),
        }
    }
}

/// The two blocks of a decoder layer, as [`Family::residual_add`] names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Block {
    /// The attention block.
    Attention,
    /// The feed-forward (MLP or experts) block.
    Mlp,
}

/// Which of a family's RoPEs a layer applies ([`Family::layer_rope_kind`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerRope {
    /// No rotation (a NoPE layer).
    None,
    /// The config's RoPE (`cfg.rope`).
    Config,
    /// The family's [`Family::other_rope`]; the config's where it has none.
    Other,
}

impl LayerRope {
    /// The config's RoPE where `rotates`, none otherwise.
    pub fn config_if(rotates: bool) -> Self {
        if rotates {
            Self::Config
        } else {
            Self::None
        }
    }

    /// The family's other RoPE where `other`, the config's otherwise.
    pub fn other_if(other: bool) -> Self {
        if other {
            Self::Other
        } else {
            Self::Config
        }
    }
}

/// What a family changes in the decoder; every default is Llama's. Every `Family` that is
/// its config's knobs (`Debug + PartialEq`) is [`FamilyKnobs`] that build with [`build`].
pub trait Family {
    /// The checkpoint module names.
    fn names(&self) -> Names {
        Names::LLAMA
    }

    /// The checkpoint index of built layer `i`, whose module is `{root}.{layers}.{index}`: by
    /// default `i` (Mllama's text decoder builds its self-attention layers alone, each read at
    /// its own index; its KV caches stay numbered by built layer).
    fn checkpoint_layer(&self, i: usize) -> usize {
        i
    }

    /// How the builder renames checkpoint tensors before reading them (`None`: it reads the
    /// checkpoint's own names).
    fn checkpoint_renaming(&self) -> Option<CheckpointRenaming> {
        None
    }

    /// The norm every layer norm and the final norm apply.
    fn norm(&self, cfg: &ArchConfig) -> Norm {
        Norm {
            kind: NormKind::Rms,
            eps: cfg.rms_norm_eps,
        }
    }

    /// The stream layer `i` (module `layer`) works on, from the stream `x` the previous layer
    /// (or [`Family::embed`]) left: by default `x` itself (Gemma 3n keeps several streams and
    /// gives each layer its AltUp prediction of the active one).
    fn layer_input(
        &self,
        _b: &mut GraphBuilder,
        _cfg: &ArchConfig,
        x: &str,
        _at: (&str, usize),
        _dtype: DType,
    ) -> String {
        x.to_string()
    }

    /// Where a layer's norms sit.
    fn layer_norms(&self) -> LayerNorms {
        LayerNorms::PRE
    }

    /// Where layer `i`'s norms sit: by default [`Family::layer_norms`] (ModernBERT's first
    /// layer has no attention norm).
    fn layer_norms_of(&self, _i: usize) -> LayerNorms {
        self.layer_norms()
    }

    /// Whether a layer's post norms ([`LayerNorms::post_attention`], `post_mlp`) normalise the
    /// residual sum, `norm(x + f(x))` (the original Transformer's post-LN: OpenAI GPT, OPT-350m),
    /// instead of the block output before its add, `x + norm(f(x))`.
    fn norm_after_residual(&self) -> bool {
        false
    }

    /// Whether the last layer's output goes through the final norm `{root}.{final_norm}`
    /// before the LM head (false: straight to the head, OpenAI GPT).
    fn final_norm(&self) -> bool {
        true
    }

    /// The norm the final norm applies: by default [`Family::norm`] (CTRL's final norm reads
    /// its epsilon from the config, its layers' norms have a fixed one).
    fn final_norm_of(&self, cfg: &ArchConfig) -> Norm {
        self.norm(cfg)
    }

    /// Whether attention and MLP both read the layer input and are added to the residual
    /// together, `x + (attn(norm(x)) + mlp(norm'(x)))`, instead of one after the other: the
    /// MLP reads the attention's normed input when [`LayerNorms::pre_mlp`] is `None` (Phi),
    /// else its own norm of `x` (GPT-NeoX).
    fn parallel_blocks(&self) -> bool {
        false
    }

    /// The width of the token embedding table and of the LM head's input (OPT's
    /// `word_embed_proj_dim`): by default the hidden size.
    fn embed_width(&self, cfg: &ArchConfig) -> usize {
        cfg.hidden_size
    }

    /// The LM head's output width, the logits' last dimension: by default the vocabulary size
    /// (Apertus 1.5's `output_vocab_size`: a head pruned to the first ids).
    fn logits_width(&self, cfg: &ArchConfig) -> usize {
        cfg.vocab_size
    }

    /// The embeddings from the gathered token rows `x` (e.g. scaled, projected, or plus
    /// learned positions).
    fn embed(
        &self,
        _b: &mut GraphBuilder,
        _cfg: &ArchConfig,
        _io: &DecoderInputs,
        x: String,
        _dtype: DType,
    ) -> String {
        x
    }

    /// Whether q and k are rotated at all; `false` (positions learned in the embeddings or
    /// given by an attention bias) skips [`Family::rotary`] and [`Family::layer_rope`].
    fn rotary_positions(&self, _cfg: &ArchConfig) -> bool {
        true
    }

    /// The rows of `position_ids` ([`DecoderDims::position_rows`]): `None` (`[batch,
    /// sequence]`) by default.
    fn position_rows(&self, _cfg: &ArchConfig) -> Option<usize> {
        None
    }

    /// A second RoPE, which the layers [`Family::layer_rope_kind`] marks
    /// [`LayerRope::Other`] apply instead of the config's: its parameters and the module its
    /// cos/sin tables are named under (Gemma 3's sliding-window layers:
    /// `model.rotary_emb_local`). `None` by default: one RoPE.
    fn other_rope(&self) -> Option<(&Rope, &'static str)> {
        None
    }

    /// Which RoPE layer `i` applies: by default the config's.
    fn layer_rope_kind(&self, _cfg: &ArchConfig, _i: usize) -> LayerRope {
        LayerRope::Config
    }

    /// The rotary cos/sin tables of the current tokens (computed once per graph);
    /// [`Family::layer_rope`] picks one per layer. By default the config's RoPE, then the
    /// [`Family::other_rope`] if there is one.
    fn rotary(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        io: &DecoderInputs,
        dtype: DType,
    ) -> Vec<RopeTables> {
        let mut tables = vec![plain_rotary(b, cfg, io, dtype)];
        if let Some((rope, prefix)) = self.other_rope() {
            let (positions, ids) = (cfg.max_position_embeddings, &io.position_ids);
            tables.push(named_rope_tables(b, prefix, rope, positions, ids, dtype));
        }
        tables
    }

    /// The RoPE layer `i` applies: its parameters and the index of its tables in what
    /// [`Family::rotary`] returned; `None` for no rotation. By default what
    /// [`Family::layer_rope_kind`] says (the config's RoPE where the family has no
    /// [`Family::other_rope`]).
    fn layer_rope<'c>(&'c self, cfg: &'c ArchConfig, i: usize) -> Option<(&'c Rope, usize)> {
        match (self.layer_rope_kind(cfg, i), self.other_rope()) {
            (LayerRope::None, _) => None,
            (LayerRope::Other, Some((rope, _))) => Some((rope, 1)),
            (LayerRope::Config | LayerRope::Other, _) => Some((&cfg.rope, 0)),
        }
    }

    /// The q, k and v projections of `x` in attention module `attn`: by default
    /// [`plain_qkv`].
    fn qkv(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        attn: &str,
        dtype: DType,
    ) -> [String; 3] {
        plain_qkv(b, cfg, x, attn, dtype)
    }

    /// The q, k and v that layer `i`'s attention (module `attn`) takes from its input `x`:
    /// 3-D, `spec.q_heads` (`spec.kv_heads`) heads of `cfg.head_dim` channels, q and k
    /// rotated. By default [`Family::qkv`], then [`Family::qk_norm`], then the RoPE
    /// [`Family::layer_rope`] picks from the tables `rotary` on q and k.
    #[allow(clippy::too_many_arguments)]
    fn attention_qkv(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        attn: &str,
        i: usize,
        rotary: &[RopeTables],
        spec: &AttentionSpec<'_>,
        dtype: DType,
    ) -> [String; 3] {
        let [q, k, v] = self.qkv(b, cfg, x, attn, dtype);
        let (q, k) = self.qk_norm(b, cfg, q, k, attn, dtype);
        let (q, k) = match self.rotary_positions(cfg) {
            true => self.rotate_qk(b, cfg, i, rotary, (q, k), spec),
            false => (q, k),
        };
        [q, k, v]
    }

    /// `q` and `k` (3-D, `spec.q_heads` / `spec.kv_heads` heads of `cfg.head_dim` channels)
    /// rotated by the RoPE [`Family::layer_rope`] picks for layer `i` from the tables
    /// `rotary`; as they are for a layer without one.
    fn rotate_qk(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        i: usize,
        rotary: &[RopeTables],
        (q, k): (String, String),
        spec: &AttentionSpec<'_>,
    ) -> (String, String) {
        let Some((rope, t)) = self.layer_rope(cfg, i) else {
            return (q, k);
        };
        let (d, tables) = (cfg.head_dim, &rotary[t]);
        let q = rotary_embedding(b, &q, tables, rope, spec.q_heads, d);
        let k = rotary_embedding(b, &k, tables, rope, spec.kv_heads, d);
        (q, k)
    }

    /// The short convolution that mixes layer `i`'s tokens instead of attention (LFM2's `conv`
    /// layers: [`gated_short_conv`] of module `{layer}.conv`, its input's padded positions
    /// zeroed first), or `None` (the default) for an attention layer.
    fn short_conv(&self, _cfg: &ArchConfig, _i: usize) -> Option<ShortConv> {
        None
    }

    /// The Mamba2, Mamba or Gated DeltaNet mixer that mixes layer `i`'s tokens instead of attention (module
    /// `{layer}.{ssm_module}`, carrying its conv and SSM states), or `None` (the default) for
    /// a layer of attention or short convolution. Whether an MLP block follows it is
    /// [`Family::ssm_with_mlp`].
    fn ssm_mixer(&self, _cfg: &ArchConfig, _i: usize) -> Option<SsmMixer> {
        None
    }

    /// The module of a Mamba2 layer's mixer inside the layer (`mixer`, Mamba2's; `mamba` in
    /// the hybrids Bamba and Granite-4).
    fn ssm_module(&self) -> &'static str {
        "mixer"
    }

    /// The mixer that runs beside layer `i`'s attention on the same normed input (module
    /// `{layer}.{ssm_module}`), its output added to the attention's before the residual add, the
    /// layer carrying its KV cache and the mixer's conv and SSM states
    /// ([`LayerCache::KvAndSsm`]: Falcon-H1); `None` (the default) for none.
    fn parallel_ssm(&self, _cfg: &ArchConfig, _i: usize) -> Option<SsmMixer> {
        None
    }

    /// Whether a Mamba2 layer goes on as an attention layer does after its mixer (residual
    /// add, then the MLP block with its norms: the hybrids), or (the default, Mamba2) is its
    /// pre-norm, the mixer and the residual add alone.
    fn ssm_with_mlp(&self) -> bool {
        false
    }

    /// Whether layer `i` mixes tokens at all (the default); `false`: the layer is its MLP block
    /// alone ([`LayerNorms::pre_mlp`], [`Family::layer_mlp`], the residual add) and carries no
    /// state (Nemotron-H's `mlp` and `moe` layers).
    fn mixes_tokens(&self, _cfg: &ArchConfig, _i: usize) -> bool {
        true
    }

    /// Whether an attention layer goes on to the MLP block after its residual add (the
    /// default), or is its pre-norm, the attention and the residual add alone (Nemotron-H).
    fn attention_with_mlp(&self) -> bool {
        true
    }

    /// The form of [`Family::qk_norm`]'s default.
    fn qk_norm_kind(&self, _cfg: &ArchConfig) -> QkNorm {
        QkNorm::Off
    }

    /// Normalisation of the projected q and k, before RoPE: by default
    /// [`Family::qk_norm_kind`]'s.
    fn qk_norm(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        q: String,
        k: String,
        attn: &str,
        dtype: DType,
    ) -> (String, String) {
        let norm = self.norm(cfg);
        self.qk_norm_kind(cfg)
            .apply(b, cfg, norm, q, k, attn, dtype)
    }

    /// The ALiBi slopes, one per query head, when the attention adds `slope · key position` to
    /// its scores (the slopes times any scale the family applies to the bias); `None` (the
    /// default) for no ALiBi. The bias becomes the attention's float mask
    /// ([`super::components::alibi`]).
    fn alibi_slopes(&self, _cfg: &ArchConfig) -> Option<Vec<f32>> {
        None
    }

    /// The chunk of layer `i`'s chunked local attention, `None` (the default) where it is not
    /// chunked: its queries see only the keys of their own chunk of `chunk` valid tokens
    /// ([`super::components::chunked_mask`], Llama 4). GroupQueryAttention has no such mask, so
    /// the fusion leaves these layers opset-24 `Attention`.
    fn layer_chunk(&self, _cfg: &ArchConfig, _i: usize) -> Option<usize> {
        None
    }

    /// Layer `i`'s learned indexer (DeepSeek Sparse Attention), `None` (the default) where its
    /// attention is dense. A layer with its own ([`IndexedLayer::Own`]) carries the indexer's
    /// key cache, and its [`Family::attention_qkv`] must write the additive index mask named
    /// `spec.mask` from what `spec.index` gives ([`super::components::Indexer::mask`]); a
    /// [`IndexedLayer::Shared`] layer attends through the mask of the layer it names.
    fn layer_indexer(&self, _cfg: &ArchConfig, _i: usize) -> Option<IndexedLayer> {
        None
    }

    /// The key/value heads and head size of layer `i`'s KV cache: by default
    /// `num_key_value_heads` and `head_dim` (Gemma 4's full-attention layers have their own).
    fn layer_kv_shape(&self, cfg: &ArchConfig, _i: usize) -> (usize, usize) {
        (cfg.num_key_value_heads, cfg.head_dim)
    }

    /// The earlier layer whose keys and values layer `i` attends to instead of its own, or
    /// `None` (the default) for its own. Such a layer has no cache: its attention takes the
    /// lender's cache inputs as its past and the key and value that [`Family::attention_qkv`]
    /// returns for it (the lender's current ones), and its present outputs are no graph
    /// outputs (Gemma 4's KV sharing).
    fn kv_lender(&self, _cfg: &ArchConfig, _i: usize) -> Option<usize> {
        None
    }

    /// The query heads of layer `i`'s attention: by default `num_attention_heads` (Laguna
    /// sets a count per layer; its key/value heads stay `num_key_value_heads`).
    fn layer_q_heads(&self, cfg: &ArchConfig, _i: usize) -> usize {
        cfg.num_attention_heads
    }

    /// The attention softmax scale.
    fn attention_scale(&self, cfg: &ArchConfig) -> f32 {
        (cfg.head_dim as f32).powf(-0.5)
    }

    /// The attention score soft-cap (0: none).
    fn attention_softcap(&self, _cfg: &ArchConfig) -> f32 {
        0.0
    }

    /// The attention of the projected, rotated `q`, `k`, `v` (3-D) in attention module
    /// `attn`: by default opset-24 `Attention` with [`Family::attention_softcap`].
    #[allow(clippy::too_many_arguments)]
    fn attention_core(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        _io: &DecoderInputs,
        [q, k, v]: [&str; 3],
        spec: &AttentionSpec<'_>,
        _attn: &str,
        _dtype: DType,
    ) -> String {
        soft_capped_attention(b, q, k, v, spec, self.attention_softcap(cfg))
    }

    /// The output projection of the attention result `y` in attention module `attn`.
    fn o_proj(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        y: &str,
        attn: &str,
        dtype: DType,
    ) -> String {
        let (q, h, proj) = (cfg.q_size(), cfg.hidden_size, self.names().o_proj);
        linear(b, y, &format!("{attn}.{proj}"), q, h, cfg.o_bias, dtype)
    }

    /// The attention's output from its result `y` (module `attn`, of `spec.q_heads` heads) and
    /// its input `x`: by default [`Family::o_proj`] of `y`; a family whose attention gates its
    /// result by a projection of `x` (MiniCPM5-MoE) multiplies the gate in first.
    #[allow(clippy::too_many_arguments)]
    fn attention_output(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        _x: &str,
        y: &str,
        attn: &str,
        _spec: &AttentionSpec<'_>,
        dtype: DType,
    ) -> String {
        self.o_proj(b, cfg, y, attn, dtype)
    }

    /// The MLP of module `mlp` (`….layers.{i}.mlp`).
    fn mlp(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        mlp: &str,
        dtype: DType,
    ) -> String {
        let sizes = (cfg.hidden_size, cfg.intermediate_size);
        let act = GateActivation::Silu;
        gated_mlp(b, x, mlp, sizes, cfg.mlp_bias, act, dtype)
    }

    /// The feed-forward block of layer `i` (module `layer`, `….layers.{i}`): by default the
    /// [`Family::mlp`] of `{layer}.mlp`; mixture-of-experts families pick per layer.
    fn layer_mlp(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        layer: &str,
        _i: usize,
        dtype: DType,
    ) -> String {
        self.mlp(b, cfg, x, &format!("{layer}.mlp"), dtype)
    }

    /// A block output `y` as it enters the residual add.
    fn residual_branch(
        &self,
        _b: &mut GraphBuilder,
        _cfg: &ArchConfig,
        y: String,
        _dtype: DType,
    ) -> String {
        y
    }

    /// The residual stream after block `block` of layer `i` (module `layer`) adds its output
    /// `y` to the stream `x` (in sequential layers; parallel blocks add as they are): by
    /// default `x + y` (Doge scales the stream by a learned vector first, Beam scales both by
    /// the depth).
    #[allow(clippy::too_many_arguments)]
    fn residual_add(
        &self,
        b: &mut GraphBuilder,
        _cfg: &ArchConfig,
        x: &str,
        y: &str,
        (_layer, _i): (&str, usize),
        _block: Block,
        _dtype: DType,
    ) -> String {
        b.op("Add", &[x, y], vec![])
    }

    /// Writes the graph output `logits` from the final hidden states `x` and the LM head
    /// weight `head` (`[embed_width, vocab]`): `x @ head`.
    fn logits(&self, b: &mut GraphBuilder, _cfg: &ArchConfig, x: &str, head: &str, _dtype: DType) {
        b.op_into("MatMul", &[x, head], vec![], "logits");
    }
}

/// A decoder family's knobs build the decoder skeleton with their hooks.
impl<K: Family + Debug + PartialEq + Send + Sync + 'static> FamilyKnobs for K {
    fn build(&self, cfg: &ArchConfig, dtype: DType) -> Graph {
        build(cfg, dtype, self)
    }

    fn checkpoint_renaming(&self) -> Option<CheckpointRenaming> {
        Family::checkpoint_renaming(self)
    }
}

/// The plain Llama decoder: every [`Family`] default, no knobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Llama;

impl Family for Llama {}

/// The plain RoPE tables of `cfg.rope`, gathered by `position_ids`.
pub fn plain_rotary(
    b: &mut GraphBuilder,
    cfg: &ArchConfig,
    io: &DecoderInputs,
    dtype: DType,
) -> RopeTables {
    let positions = cfg.max_position_embeddings;
    rope_tables(b, &cfg.rope, positions, &io.position_ids, dtype)
}

/// The logits `x @ head` as graph output `logits`, soft-capped to `cap · tanh(· / cap)`
/// where `cap` is given (Gemma 2's `final_logit_softcapping` and the families that copy it).
pub fn soft_capped_logits(
    b: &mut GraphBuilder,
    x: &str,
    head: &str,
    cap: Option<f32>,
    dtype: DType,
) {
    let Some(cap) = cap else {
        b.op_into("MatMul", &[x, head], vec![], "logits");
        return;
    };
    let raw = b.op("MatMul", &[x, head], vec![]);
    let c = scalar(b, cap, dtype);
    let scaled = b.op("Div", &[&raw, &c], vec![]);
    let squashed = b.op("Tanh", &[&scaled], vec![]);
    b.op_into("Mul", &[&squashed, &c], vec![], "logits");
}

/// Llama's q, k and v projections of `x`: `{attn}.q_proj`, `k_proj` and `v_proj`, biased per
/// `cfg.qkv_bias`.
pub fn plain_qkv(
    b: &mut GraphBuilder,
    cfg: &ArchConfig,
    x: &str,
    attn: &str,
    dtype: DType,
) -> [String; 3] {
    let h = cfg.hidden_size;
    let mut proj = |name: &str, width: usize| {
        let prefix = format!("{attn}.{name}");
        linear(b, x, &prefix, h, width, cfg.qkv_bias, dtype)
    };
    [
        proj("q_proj", cfg.q_size()),
        proj("k_proj", cfg.kv_size()),
        proj("v_proj", cfg.kv_size()),
    ]
}

/// Writes the graph output `logits` as `x @ head + lm_head.bias`: an LM head with a bias (a
/// [`Family::logits`] hook).
pub fn biased_logits(b: &mut GraphBuilder, cfg: &ArchConfig, x: &str, head: &str, dtype: DType) {
    let y = b.op("MatMul", &[x, head], vec![]);
    let bias = b.initializer(Initializer {
        name: "lm_head.bias".into(),
        dtype,
        shape: vec![cfg.vocab_size],
        source: Some(TensorSource::Checkpoint("lm_head.bias".into())),
    });
    b.op_into("Add", &[&y, &bias], vec![], "logits");
}

/// Builds the decoder graph of `cfg` with the hooks of `family`.
pub fn build(cfg: &ArchConfig, dtype: DType, family: &dyn Family) -> Graph {
    let mut b = GraphBuilder::new("main_graph");
    let (h, width) = (cfg.hidden_size, family.embed_width(cfg));
    let names = family.names();
    let dims = DecoderDims {
        vocab: family.logits_width(cfg),
        position_rows: family.position_rows(cfg),
        ..DecoderDims::of(cfg)
    };
    let caches: Vec<LayerCache> = (0..cfg.num_hidden_layers)
        .map(|i| {
            if !family.mixes_tokens(cfg, i) {
                return LayerCache::Stateless;
            }
            match (family.ssm_mixer(cfg, i), family.short_conv(cfg, i)) {
                (Some(mixer), _) => LayerCache::Ssm(mixer),
                (None, Some(conv)) => LayerCache::Conv(conv),
                (None, None) => match (family.kv_lender(cfg, i), family.layer_indexer(cfg, i)) {
                    (Some(lender), _) => LayerCache::Borrowed(lender),
                    (None, Some(IndexedLayer::Own(ix))) => LayerCache::Indexed {
                        index_dim: ix.head_dim,
                    },
                    (None, _) => match family.layer_kv_shape(cfg, i) {
                        (kv, d) if (kv, d) == (cfg.num_key_value_heads, cfg.head_dim) => {
                            match family.parallel_ssm(cfg, i) {
                                Some(mixer) => LayerCache::KvAndSsm(mixer),
                                None => LayerCache::Kv,
                            }
                        }
                        (kv_heads, head_dim) => LayerCache::KvOf { kv_heads, head_dim },
                    },
                },
            }
        })
        .collect();
    let io = hybrid_decoder_io(&mut b, dims, dtype, &caches);

    let embed_module = format!("{}.{}", names.root, names.embed);
    b.set_scope(&embed_module);
    let embed = b.initializer(Initializer {
        name: format!("{embed_module}.weight"),
        dtype,
        shape: vec![cfg.vocab_size, width],
        source: Some(TensorSource::Checkpoint(format!("{embed_module}.weight"))),
    });
    let gathered = b.op(
        "Gather",
        &[&embed, &io.input_ids],
        vec![("axis", Attr::Int(0))],
    );
    let mut x = family.embed(&mut b, cfg, &io, gathered, dtype);

    b.set_scope("model.rotary_emb");
    let rotary = match family.rotary_positions(cfg) {
        true => family.rotary(&mut b, cfg, &io, dtype),
        false => vec![],
    };

    b.set_scope(&format!("{}.mask", names.root));
    let mut masks = masks(&mut b, cfg, &io);
    if let Some(slopes) = family.alibi_slopes(cfg) {
        for (window, mask) in masks.iter_mut() {
            let suffix = window.map(|w| format!(".window{w}")).unwrap_or_default();
            *mask = alibi_bias(&mut b, mask, &io.attention_mask, &slopes, dtype, &suffix);
        }
    }

    let index_allowed = caches
        .iter()
        .any(|c| matches!(c, LayerCache::Indexed { .. }))
        .then(|| causal_mask(&mut b, &masks[&None], &io));

    let token_mask = caches
        .iter()
        .any(|c| {
            matches!(
                c,
                LayerCache::Conv(_) | LayerCache::Ssm(_) | LayerCache::KvAndSsm(_)
            )
        })
        .then(|| token_mask(&mut b, &io, dtype));
    let mut chunk_masks = BTreeMap::new();
    for chunk in (0..cfg.num_hidden_layers).filter_map(|i| family.layer_chunk(cfg, i)) {
        if let std::collections::btree_map::Entry::Vacant(slot) = chunk_masks.entry(chunk) {
            let (ids, mask) = (&io.input_ids, &io.attention_mask);
            slot.insert(chunked_mask(&mut b, &masks[&None], ids, mask, chunk));
        }
    }

    let layer = Layer {
        cfg,
        family,
        norm: family.norm(cfg),
        dtype,
        io: &io,
        rotary: &rotary,
        masks: &masks,
        token_mask: token_mask.as_deref(),
        chunk_masks: &chunk_masks,
        index_allowed: index_allowed.as_deref(),
    };
    for i in 0..cfg.num_hidden_layers {
        let p = format!(
            "{}.{}.{}",
            names.root,
            names.layers,
            family.checkpoint_layer(i)
        );
        b.set_scope(&p);
        x = layer.build(&mut b, &x, &p, i);
    }

    let normed = if family.final_norm() {
        let final_norm = format!("{}.{}", names.root, names.final_norm);
        b.set_scope(&final_norm);
        let norm = family.final_norm_of(cfg);
        norm.apply(&mut b, &x, &final_norm, h, dtype)
    } else {
        x
    };
    b.set_scope("lm_head");
    let head = if cfg.tie_word_embeddings {
        b.op(
            "Transpose",
            &[&embed],
            vec![("perm", Attr::Ints(vec![1, 0]))],
        )
    } else {
        b.initializer(Initializer {
            name: "lm_head.weight_t".into(),
            dtype,
            shape: vec![width, family.logits_width(cfg)],
            source: Some(TensorSource::Transpose(Box::new(TensorSource::Checkpoint(
                "lm_head.weight".into(),
            )))),
        })
    };
    family.logits(&mut b, cfg, &normed, &head, dtype);
    b.finish()
}

/// What every layer shares.
struct Layer<'a> {
    cfg: &'a ArchConfig,
    family: &'a dyn Family,
    norm: Norm,
    dtype: DType,
    io: &'a DecoderInputs,
    rotary: &'a [RopeTables],
    masks: &'a BTreeMap<Option<usize>, String>,
    /// The current tokens' `attention_mask` columns `[B, S, 1]` in the model dtype, where a
    /// layer is a short convolution.
    token_mask: Option<&'a str>,
    /// The chunked-attention mask of each chunk size a layer uses.
    chunk_masks: &'a BTreeMap<usize, String>,
    /// The causal padding mask the learned indexers select from, where a layer has one.
    index_allowed: Option<&'a str>,
}

impl Layer<'_> {
    /// Layer `i` (module `p`) on the residual stream `x`; returns the new stream.
    fn build(&self, b: &mut GraphBuilder, x: &str, p: &str, i: usize) -> String {
        let (cfg, family, dtype) = (self.cfg, self.family, self.dtype);
        let x = &family.layer_input(b, cfg, x, (p, i), dtype);
        let norms = family.layer_norms_of(i);
        if let LayerPast::Stateless = self.io.past[i] {
            // The MLP block alone.
            let mlp_in = self.norm_at(b, x, p, norms.pre_mlp);
            let m = family.layer_mlp(b, cfg, &mlp_in, p, i, dtype);
            return b.op("Add", &[x, &m], vec![]);
        }
        let attn_in = self.norm_at(b, x, p, norms.pre_attention);
        let o = match &self.io.past[i] {
            LayerPast::Kv { key, value }
            | LayerPast::Borrowed { key, value }
            | LayerPast::Indexed { key, value, .. }
            | LayerPast::KvAndSsm { key, value, .. } => {
                let present = match &self.io.past[i] {
                    LayerPast::Borrowed { .. } => (
                        b.fresh_name("borrowed_present_key"),
                        b.fresh_name("borrowed_present_value"),
                    ),
                    _ => (format!("present.{i}.key"), format!("present.{i}.value")),
                };
                let mut mask = match family.layer_chunk(cfg, i) {
                    Some(chunk) => self.chunk_masks[&chunk].clone(),
                    None => self.masks[&cfg.layer_windows[i]].clone(),
                };
                let present_index = present_index_key_name(i);
                let mut index = None;
                match (family.layer_indexer(cfg, i), &self.io.past[i]) {
                    (Some(IndexedLayer::Own(_)), LayerPast::Indexed { index_key, .. }) => {
                        mask = index_mask_name(i);
                        index = Some(IndexIo {
                            allowed: self.index_allowed.expect("an indexed layer has its mask"),
                            past: index_key,
                            present: &present_index,
                        });
                    }
                    (Some(IndexedLayer::Shared(owner)), _) => mask = index_mask_name(owner),
                    _ => {}
                }
                let spec = AttentionSpec {
                    q_heads: family.layer_q_heads(cfg, i),
                    kv_heads: family.layer_kv_shape(cfg, i).0,
                    scale: family.attention_scale(cfg),
                    mask: &mask,
                    past: (key, value),
                    present: (&present.0, &present.1),
                    index,
                };
                let attn = format!("{p}.{}", family.names().attn);
                let o = self.attention(b, &attn_in, &attn, i, &spec);
                let o = match &self.io.past[i] {
                    LayerPast::KvAndSsm {
                        conv, ssm, mixer, ..
                    } => {
                        let m = self.ssm(b, &attn_in, p, i, (conv, ssm), *mixer);
                        b.op("Add", &[&m, &o], vec![])
                    }
                    _ => o,
                };
                if !family.attention_with_mlp() {
                    return b.op("Add", &[x, &o], vec![]);
                }
                o
            }
            LayerPast::Conv { state, conv } => {
                let present = present_conv_name(i);
                let state = ConvState {
                    past: state,
                    present: &present,
                };
                let masked = match self.token_mask {
                    Some(mask) => b.op("Mul", &[&attn_in, mask], vec![]),
                    None => attn_in.clone(),
                };
                gated_short_conv(b, &masked, &format!("{p}.conv"), *conv, state, dtype)
            }
            LayerPast::Stateless => unreachable!("built above"),
            LayerPast::Ssm { conv, ssm, mixer } => {
                let o = self.ssm(b, &attn_in, p, i, (conv, ssm), *mixer);
                if !family.ssm_with_mlp() {
                    // A Mamba2 or Mamba block is its mixer alone: no MLP.
                    return b.op("Add", &[x, &o], vec![]);
                }
                o
            }
        };
        if family.parallel_blocks() {
            let mlp_in = match norms.pre_mlp {
                Some(_) => self.norm_at(b, x, p, norms.pre_mlp),
                None => attn_in,
            };
            let m = family.layer_mlp(b, cfg, &mlp_in, p, i, dtype);
            let branches = b.op("Add", &[&o, &m], vec![]);
            return b.op("Add", &[&branches, x], vec![]);
        }
        if family.norm_after_residual() {
            let o = family.residual_branch(b, cfg, o, dtype);
            let x = family.residual_add(b, cfg, x, &o, (p, i), Block::Attention, dtype);
            let x = self.norm_at(b, &x, p, norms.post_attention);
            let mlp_in = self.norm_at(b, &x, p, norms.pre_mlp);
            let m = family.layer_mlp(b, cfg, &mlp_in, p, i, dtype);
            let m = family.residual_branch(b, cfg, m, dtype);
            let x = family.residual_add(b, cfg, &x, &m, (p, i), Block::Mlp, dtype);
            return self.norm_at(b, &x, p, norms.post_mlp);
        }
        let o = self.norm_at(b, &o, p, norms.post_attention);
        let o = family.residual_branch(b, cfg, o, dtype);
        let x = family.residual_add(b, cfg, x, &o, (p, i), Block::Attention, dtype);
        let mlp_in = self.norm_at(b, &x, p, norms.pre_mlp);
        let m = family.layer_mlp(b, cfg, &mlp_in, p, i, dtype);
        let m = self.norm_at(b, &m, p, norms.post_mlp);
        let m = family.residual_branch(b, cfg, m, dtype);
        family.residual_add(b, cfg, &x, &m, (p, i), Block::Mlp, dtype)
    }

    /// Layer `i`'s (module `p`) recurrent mixer of the normed input `x`, continuing from its
    /// conv and SSM state inputs `past`.
    fn ssm(
        &self,
        b: &mut GraphBuilder,
        x: &str,
        p: &str,
        i: usize,
        (conv, ssm): (&str, &str),
        mixer: SsmMixer,
    ) -> String {
        let dtype = self.dtype;
        let (conv_out, ssm_out) = (present_conv_name(i), present_ssm_name(i, mixer));
        let state = SsmState {
            conv: ConvState {
                past: conv,
                present: &conv_out,
            },
            past: ssm,
            present: &ssm_out,
        };
        let mask = self.token_mask.expect("a recurrent layer has a token mask");
        let module = format!("{p}.{}", self.family.ssm_module());
        match mixer {
            SsmMixer::Mamba2(m) => mamba2_mixer(b, x, &module, m, state, mask, dtype),
            SsmMixer::Mamba(m) => mamba_mixer(b, x, &module, m, state, mask, dtype),
            SsmMixer::GatedDelta(m) => gated_delta_mixer(b, x, &module, m, state, mask, dtype),
        }
    }

    /// The layer norm `{p}.{module}` of `x`, or `x` where the layer has none.
    fn norm_at(&self, b: &mut GraphBuilder, x: &str, p: &str, module: Option<&str>) -> String {
        match module {
            Some(m) => {
                let (h, dtype) = (self.cfg.hidden_size, self.dtype);
                self.norm.apply(b, x, &format!("{p}.{m}"), h, dtype)
            }
            None => x.to_string(),
        }
    }

    /// q/k/v projections, q/k norms, RoPE, attention and the output projection of module
    /// `attn` in layer `i`.
    fn attention(
        &self,
        b: &mut GraphBuilder,
        x: &str,
        attn: &str,
        i: usize,
        spec: &AttentionSpec<'_>,
    ) -> String {
        let (cfg, family, dtype) = (self.cfg, self.family, self.dtype);
        let [q, k, v] = family.attention_qkv(b, cfg, x, attn, i, self.rotary, spec, dtype);
        let y = family.attention_core(b, cfg, self.io, [&q, &k, &v], spec, attn, dtype);
        family.attention_output(b, cfg, x, &y, attn, spec, dtype)
    }
}

/// The `attention_mask` columns of the current tokens (its last `S`), as `[B, S, 1]` in
/// `dtype`: a short convolution's input is multiplied by it, so that padded positions enter
/// neither its output nor its state (transformers zeroes them the same way).
pub(crate) fn token_mask(b: &mut GraphBuilder, io: &DecoderInputs, dtype: DType) -> String {
    let seq = b.op(
        "Shape",
        &[&io.input_ids],
        vec![("start", Attr::Int(1)), ("end", Attr::Int(2))],
    );
    let start = b.op("Neg", &[&seq], vec![]);
    let (end, axis) = (b.const_i64(&[i64::MAX]), b.const_i64(&[1]));
    let current = b.op("Slice", &[&io.attention_mask, &start, &end, &axis], vec![]);
    let cast = b.op(
        "Cast",
        &[&current],
        vec![("to", Attr::Int(dtype.onnx_code() as i64))],
    );
    let last = b.const_i64(&[-1]);
    b.op("Unsqueeze", &[&cast, &last], vec![])
}

/// The padding mask and one sliding-window mask per distinct window, keyed by window.
fn masks(
    b: &mut GraphBuilder,
    cfg: &ArchConfig,
    io: &DecoderInputs,
) -> BTreeMap<Option<usize>, String> {
    let full = padding_mask(b, &io.input_ids, &io.attention_mask);
    let mut masks = BTreeMap::from([(None, full.clone())]);
    for window in cfg.layer_windows.iter().flatten() {
        if let std::collections::btree_map::Entry::Vacant(slot) = masks.entry(Some(*window)) {
            slot.insert(sliding_window_mask(
                b,
                &full,
                &io.input_ids,
                &io.attention_mask,
                *window,
            ));
        }
    }
    masks
}
