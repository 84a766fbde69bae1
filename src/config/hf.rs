//! The raw `config.json` as transformers writes it (v4 and v5 spellings), before
//! normalisation.

use serde::Deserialize;
use serde_json::Value;

/// Fields of a Hugging Face `config.json` that mobius reads. Everything is optional here;
/// [`super::ArchConfig::from_hf`] decides what is required.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct HfConfig {
    /// `model_type`.
    pub model_type: Option<String>,
    /// `architectures` (the transformers classes the checkpoint was saved from).
    pub architectures: Option<Value>,
    /// `text_config` (image-text models: the config of their text decoder).
    pub text_config: Option<Value>,
    /// `hidden_size`.
    pub hidden_size: Option<i64>,
    /// `intermediate_size` (Gemma 3n writes one per layer: a list of equal widths reads as
    /// that width).
    #[serde(default, deserialize_with = "width_or_widths")]
    pub intermediate_size: Option<i64>,
    /// `num_attention_heads`.
    pub num_attention_heads: Option<i64>,
    /// `num_key_value_heads` (absent → multi-head attention).
    pub num_key_value_heads: Option<i64>,
    /// `head_dim` (absent or null → hidden_size / num_attention_heads).
    pub head_dim: Option<i64>,
    /// `num_hidden_layers`.
    pub num_hidden_layers: Option<i64>,
    /// `vocab_size`.
    pub vocab_size: Option<i64>,
    /// `max_position_embeddings`.
    pub max_position_embeddings: Option<i64>,
    /// `rms_norm_eps`.
    pub rms_norm_eps: Option<f64>,
    /// `hidden_act`.
    pub hidden_act: Option<String>,
    /// `tie_word_embeddings`.
    pub tie_word_embeddings: Option<bool>,
    /// `attention_bias` (Llama: bias on q/k/v/o).
    pub attention_bias: Option<bool>,
    /// `mlp_bias` (Llama).
    pub mlp_bias: Option<bool>,
    /// transformers v4: top-level `rope_theta`.
    pub rope_theta: Option<f64>,
    /// transformers v4: `rope_scaling`.
    pub rope_scaling: Option<Value>,
    /// transformers v5: `rope_parameters` (theta, type and scaling together).
    pub rope_parameters: Option<Value>,
    /// `partial_rotary_factor`.
    pub partial_rotary_factor: Option<f64>,
    /// `sliding_window`: `Some(None)` when written as `null` (no window), `None` when absent
    /// (the family's default).
    #[serde(default, deserialize_with = "nullable")]
    pub sliding_window: Option<Option<i64>>,
    /// `use_sliding_window` (Qwen2: false disables the window).
    pub use_sliding_window: Option<bool>,
    /// `max_window_layers` (Qwen2).
    pub max_window_layers: Option<i64>,
    /// `layer_types` (transformers v5).
    pub layer_types: Option<Vec<String>>,
    /// transformers v4 `torch_dtype`.
    pub torch_dtype: Option<String>,
    /// transformers v5 `dtype`.
    pub dtype: Option<String>,
    /// `bos_token_id`.
    pub bos_token_id: Option<Value>,
    /// `eos_token_id` (int or list).
    pub eos_token_id: Option<Value>,
    /// `pad_token_id`.
    pub pad_token_id: Option<Value>,
    /// `hidden_activation` (Gemma; Gemma 2/3 read it instead of `hidden_act`).
    pub hidden_activation: Option<String>,
    /// `query_pre_attn_scalar` (Gemma 2/3: attention scale = its inverse square root).
    pub query_pre_attn_scalar: Option<f64>,
    /// `attn_logit_softcapping` (Gemma 2/3); absent and null differ (absent = the default).
    #[serde(default, deserialize_with = "present")]
    pub attn_logit_softcapping: Option<Value>,
    /// `final_logit_softcapping` (Gemma 2/3); absent and null differ (absent = the default).
    #[serde(default, deserialize_with = "present")]
    pub final_logit_softcapping: Option<Value>,
    /// `sliding_window_pattern` (Gemma 3, transformers v4, Cohere 2, EXAONE 4: every n-th
    /// layer is full; EXAONE 4 configs may spell it as a string, e.g. `"LLLG"`).
    pub sliding_window_pattern: Option<Value>,
    /// `rope_local_base_freq` (Gemma 3, transformers v4: RoPE theta of sliding layers).
    pub rope_local_base_freq: Option<f64>,
    /// `use_bidirectional_attention` (Gemma 3 encoders: a boolean; Gemma 4: `"all"`,
    /// `"vision"` or null).
    pub use_bidirectional_attention: Option<Value>,
    /// GPT-2: `n_embd` (the hidden size).
    pub n_embd: Option<i64>,
    /// GPT-2: `n_layer`.
    pub n_layer: Option<i64>,
    /// GPT-2: `n_head`.
    pub n_head: Option<i64>,
    /// GPT-2: `n_positions` (rows of the learned position table).
    pub n_positions: Option<i64>,
    /// BLOOM: `n_embed` (the old spelling of `hidden_size`).
    pub n_embed: Option<i64>,
    /// BLOOM: `apply_residual_connection_post_layernorm` (the normed input as the residual).
    pub apply_residual_connection_post_layernorm: Option<bool>,
    /// Falcon: `num_kv_heads` (key/value heads of the new decoder architecture).
    pub num_kv_heads: Option<i64>,
    /// Falcon: `new_decoder_architecture`.
    pub new_decoder_architecture: Option<bool>,
    /// Falcon, GPT-BigCode: `multi_query` (one key/value head; GPT-BigCode's default true).
    pub multi_query: Option<bool>,
    /// Falcon: `parallel_attn` (attention and MLP read the same input).
    pub parallel_attn: Option<bool>,
    /// Falcon: `num_ln_in_parallel_attn` (1 or 2 norms in a parallel block).
    pub num_ln_in_parallel_attn: Option<i64>,
    /// Falcon: `bias` (biases on every projection); InternLM3: its name for `mlp_bias`.
    pub bias: Option<bool>,
    /// Falcon: `alibi` (ALiBi instead of RoPE).
    pub alibi: Option<bool>,
    /// Falcon: `ffn_hidden_size` (null → 4 · hidden_size).
    pub ffn_hidden_size: Option<i64>,
    /// Falcon: `activation` (the MLP activation).
    pub activation: Option<String>,
    /// MPT, XGLM, the BART family: `d_model` (the hidden size).
    pub d_model: Option<i64>,
    /// MPT: `n_heads`.
    pub n_heads: Option<i64>,
    /// MPT: `n_layers`.
    pub n_layers: Option<i64>,
    /// MPT: `max_seq_len`.
    pub max_seq_len: Option<i64>,
    /// MPT: `attn_config` (a dict: `softmax_scale`, `clip_qkv`, …).
    pub attn_config: Option<Value>,
    /// DBRX: `ffn_config` (a dict: `ffn_hidden_size`, `moe_num_experts`, `moe_top_k`, …).
    pub ffn_config: Option<Value>,
    /// GPT-2: `n_inner` (null → 4 · n_embd).
    pub n_inner: Option<i64>,
    /// GPT-2: `layer_norm_epsilon`.
    pub layer_norm_epsilon: Option<f64>,
    /// GPT-2: `activation_function`.
    pub activation_function: Option<String>,
    /// GPT-2: `scale_attn_weights` (false: attention scores are not scaled).
    pub scale_attn_weights: Option<bool>,
    /// GPT-J, CodeGen, MiniMax-M2: `rotary_dim` (the rotated channels of each head): `Some(None)` when
    /// written as `null`, `None` when absent (the default, 64).
    #[serde(default, deserialize_with = "nullable")]
    pub rotary_dim: Option<Option<i64>>,
    /// OpenAI GPT: `afn` (the MLP activation).
    pub afn: Option<String>,
    /// OPT: `do_layer_norm_before` (pre-norm layers; false: post-norm, OPT-350m).
    pub do_layer_norm_before: Option<bool>,
    /// OPT: `word_embed_proj_dim` (the embedding width, projected to `hidden_size` when it
    /// differs).
    pub word_embed_proj_dim: Option<i64>,
    /// OPT: `enable_bias` (biases on every projection).
    pub enable_bias: Option<bool>,
    /// OPT: `layer_norm_elementwise_affine` (LayerNorm weights and biases).
    pub layer_norm_elementwise_affine: Option<bool>,
    /// OPT, XGLM, BioGPT-like: `ffn_dim` (the MLP width).
    pub ffn_dim: Option<i64>,
    /// OPT: `_remove_final_layer_norm` (legacy: no final LayerNorm).
    #[serde(rename = "_remove_final_layer_norm")]
    pub remove_final_layer_norm: Option<bool>,
    /// GPT-Neo: `attention_types` (`[[["global", "local"], n], …]`).
    pub attention_types: Option<Value>,
    /// GPT-Neo: `window_size` (the local layers' window).
    pub window_size: Option<i64>,
    /// XGLM, BioGPT, the BART family: `scale_embedding` (token embeddings times √d_model).
    pub scale_embedding: Option<bool>,
    /// XGLM: `attention_heads`.
    pub attention_heads: Option<i64>,
    /// XGLM, GPT-Neo, EXAONE 3: `num_layers` (their name for `num_hidden_layers`).
    pub num_layers: Option<i64>,
    /// GPT-Neo: `num_heads`.
    pub num_heads: Option<i64>,
    /// CTRL: `dff` (the MLP width).
    pub dff: Option<i64>,
    /// GPT-NeoX-Japanese: `intermediate_multiple_size` (the MLP width over the hidden size).
    pub intermediate_multiple_size: Option<i64>,
    /// GPT-2: `scale_attn_by_inverse_layer_idx`.
    pub scale_attn_by_inverse_layer_idx: Option<bool>,
    /// GPT-2: `add_cross_attention` (encoder-decoder use).
    pub add_cross_attention: Option<bool>,
    /// Phi (and others): `layer_norm_eps`.
    pub layer_norm_eps: Option<f64>,
    /// Phi: `qk_layernorm` (LayerNorm on queries and keys).
    pub qk_layernorm: Option<bool>,
    /// `type_vocab_size` (BERT family: rows of the token-type embedding).
    pub type_vocab_size: Option<i64>,
    /// `position_embedding_type` (BERT family, transformers v4 configs; "absolute" is built).
    pub position_embedding_type: Option<String>,
    /// `is_decoder` (BERT family: true makes the encoder a causal decoder).
    pub is_decoder: Option<bool>,
    /// `embedding_size` (ELECTRA: width of the embeddings, projected to `hidden_size`).
    pub embedding_size: Option<i64>,
    /// `input_embedding_size` (RemBERT: width of the input embeddings).
    pub input_embedding_size: Option<i64>,
    /// `output_embedding_size` (RemBERT: width of the LM head's transform).
    pub output_embedding_size: Option<i64>,
    /// `use_task_id` (ERNIE: a task-type embedding is added).
    pub use_task_id: Option<bool>,
    /// `task_type_vocab_size` (ERNIE: rows of the task-type embedding).
    pub task_type_vocab_size: Option<i64>,
    /// `decoder_layers` (BART family).
    pub decoder_layers: Option<i64>,
    /// `decoder_attention_heads` (BART family).
    pub decoder_attention_heads: Option<i64>,
    /// `decoder_ffn_dim` (BART family: the MLP width).
    pub decoder_ffn_dim: Option<i64>,
    /// `decoder_vocab_size` (Marian: rows of the decoder's token embedding).
    pub decoder_vocab_size: Option<i64>,
    /// `output_vocab_size` (Apertus 1.5: the LM head's rows, pruned to the first ids; null or
    /// absent → `vocab_size`).
    pub output_vocab_size: Option<i64>,
    /// `rotary_value` (RoFormer: values rotated too).
    pub rotary_value: Option<bool>,
    /// `layernorm_embedding` (TrOCR: false drops the embedding LayerNorm).
    pub layernorm_embedding: Option<bool>,
    /// `use_learned_position_embeddings` (TrOCR: false for sinusoidal positions).
    pub use_learned_position_embeddings: Option<bool>,
    /// `embedding_multiplier` (Granite: scales the token embeddings).
    pub embedding_multiplier: Option<f64>,
    /// `residual_multiplier` (Granite: scales each block output before the residual add).
    pub residual_multiplier: Option<f64>,
    /// `attention_multiplier` (Granite: the attention softmax scale).
    pub attention_multiplier: Option<f64>,
    /// `logits_scaling` (Granite: logits are divided by it).
    pub logits_scaling: Option<f64>,
    /// `no_rope_layers` (SmolLM3: per layer, 1 = RoPE, 0 = no position embedding).
    pub no_rope_layers: Option<Vec<i64>>,
    /// `no_rope_layer_interval` (SmolLM3: every n-th layer skips RoPE when `no_rope_layers` is absent).
    pub no_rope_layer_interval: Option<i64>,
    /// `norm_epsilon` (StarCoder2: the LayerNorm epsilon).
    pub norm_epsilon: Option<f64>,
    /// `use_bias` (StarCoder2: biases on every projection).
    pub use_bias: Option<bool>,
    /// transformers v4 top-level `original_max_position_embeddings` (Phi-3 LongRoPE).
    pub original_max_position_embeddings: Option<i64>,
    /// `num_local_experts` (Mixtral: experts per MoE layer).
    pub num_local_experts: Option<i64>,
    /// `num_experts` (Qwen2/3-MoE, OLMoE: experts per MoE layer).
    pub num_experts: Option<i64>,
    /// `num_experts_per_tok` (MoE: experts each token is routed to).
    pub num_experts_per_tok: Option<i64>,
    /// `norm_topk_prob` (Qwen2/3-MoE: the top-k routing weights are renormalised to sum to 1).
    pub norm_topk_prob: Option<bool>,
    /// `use_expert_bias` (LFM2-MoE: the router picks on its scores plus `expert_bias`).
    pub use_expert_bias: Option<bool>,
    /// `moe_intermediate_size` (Qwen2/3-MoE: width of each routed expert).
    pub moe_intermediate_size: Option<i64>,
    /// `shared_expert_intermediate_size` (Qwen2-MoE: width of the shared expert).
    pub shared_expert_intermediate_size: Option<i64>,
    /// `decoder_sparse_step` (Qwen2/3-MoE: every n-th layer is a MoE layer).
    pub decoder_sparse_step: Option<i64>,
    /// `mlp_only_layers` (Qwen2/3-MoE: layers with a dense MLP instead of experts).
    pub mlp_only_layers: Option<Vec<i64>>,
    /// `moe_topk` (Hunyuan MoE: experts each token is routed to, one count or one per layer).
    pub moe_topk: Option<Value>,
    /// `moe_num_experts` (ERNIE 4.5 MoE: experts per MoE layer).
    pub moe_num_experts: Option<i64>,
    /// `moe_k` (ERNIE 4.5 MoE: experts each token is routed to).
    pub moe_k: Option<i64>,
    /// `moe_num_shared_experts` (ERNIE 4.5 MoE: the shared expert is this many experts wide).
    pub moe_num_shared_experts: Option<i64>,
    /// `moe_layer_start_index` (ERNIE 4.5 MoE: the first layer that may be a MoE layer).
    pub moe_layer_start_index: Option<i64>,
    /// `moe_layer_end_index` (ERNIE 4.5 MoE: the last such layer, -1 for the last layer).
    pub moe_layer_end_index: Option<i64>,
    /// `moe_layer_interval` (ERNIE 4.5 MoE: every n-th layer in that range is a MoE layer).
    pub moe_layer_interval: Option<i64>,
    /// `moe_norm_min` (ERNIE 4.5 MoE: the least divisor of the top-k renormalisation).
    pub moe_norm_min: Option<f64>,
    /// `qkv_bias` (Qwen2-MoE: biases on q, k and v).
    pub qkv_bias: Option<bool>,
    /// `use_parallel_residual` (GPT-NeoX, StableLM: attention and MLP both read the layer
    /// input and are added to the residual together).
    pub use_parallel_residual: Option<bool>,
    /// `use_qkv_bias` (StableLM: biases on q, k and v).
    pub use_qkv_bias: Option<bool>,
    /// `rotary_pct` (GPT-NeoX, transformers v4: the fraction of each head RoPE rotates).
    pub rotary_pct: Option<f64>,
    /// `rotary_emb_base` (GPT-NeoX, transformers v4: the RoPE theta).
    pub rotary_emb_base: Option<f64>,
    /// `norm_eps` (Nemotron: the LayerNorm epsilon).
    pub norm_eps: Option<f64>,
    /// `clip_qkv` (OLMo: q, k and v clamped to `[-clip_qkv, clip_qkv]`; null for none).
    pub clip_qkv: Option<f64>,
    /// `logit_scale` (Cohere: the logits are multiplied by it).
    pub logit_scale: Option<f64>,
    /// `use_qk_norm` (Cohere: a LayerNorm per head on queries and keys).
    pub use_qk_norm: Option<bool>,
    /// `router_jitter_noise` (Phi-3.5-MoE: the sparsemixer's jitter epsilon).
    pub router_jitter_noise: Option<f64>,
    /// `lm_head_bias` (Phi-3.5-MoE: the LM head has a bias).
    pub lm_head_bias: Option<bool>,
    /// `swiglu_alpha` (gpt-oss: the sigmoid gain of the experts' clamped SwiGLU).
    pub swiglu_alpha: Option<f64>,
    /// `swiglu_limit` (gpt-oss: the clamp of the experts' gate and up projections).
    pub swiglu_limit: Option<f64>,
    /// `attention_out_bias` (Seed-OSS: a bias on o, apart from `attention_bias` on q, k, v).
    pub attention_out_bias: Option<bool>,
    /// `layer_rope_theta` (Granite SWA: the RoPE base of each layer, 0 for none).
    pub layer_rope_theta: Option<Vec<f64>>,
    /// `shared_intermediate_size` (Granite-MoE shared: the width of the shared expert, 0 for
    /// none).
    pub shared_intermediate_size: Option<i64>,
    /// `use_post_norm` (HyperCLOVA X: an RMSNorm on each block's output).
    pub use_post_norm: Option<bool>,
    /// `q_lora_rank` (multi-head latent attention: the width of the query's low-rank
    /// projection; an explicit `null` for a plain `q_proj`).
    #[serde(default, deserialize_with = "nullable")]
    pub q_lora_rank: Option<Option<i64>>,
    /// `kv_lora_rank` (multi-head latent attention: the width of the compressed key/value
    /// latent).
    pub kv_lora_rank: Option<i64>,
    /// `qk_nope_head_dim` (multi-head latent attention: the query/key channels per head
    /// without rotary embedding).
    pub qk_nope_head_dim: Option<i64>,
    /// `qk_rope_head_dim` (multi-head latent attention: the rotated query/key channels per
    /// head).
    pub qk_rope_head_dim: Option<i64>,
    /// `v_head_dim` (multi-head latent attention: the value channels per head).
    #[serde(default, deserialize_with = "nullable")]
    pub v_head_dim: Option<Option<i64>>,
    /// `rope_interleave` (DeepSeek-V3: rotated pairs interleaved).
    pub rope_interleave: Option<bool>,
    /// `n_routed_experts` (DeepSeek: the routed experts of a MoE layer).
    pub n_routed_experts: Option<i64>,
    /// `n_shared_experts` (DeepSeek: the shared experts' width in routed-expert widths).
    pub n_shared_experts: Option<i64>,
    /// `num_shared_experts` (Sarvam's original spelling of `n_shared_experts`).
    pub num_shared_experts: Option<i64>,
    /// `n_group` (DeepSeek: the groups the router splits the experts into).
    #[serde(default, deserialize_with = "nullable")]
    pub n_group: Option<Option<i64>>,
    /// `topk_group` (DeepSeek: the groups a token's experts are picked from).
    #[serde(default, deserialize_with = "nullable")]
    pub topk_group: Option<Option<i64>>,
    /// `topk_method` (DeepSeek-V2: `greedy` or `group_limited_greedy`).
    pub topk_method: Option<String>,
    /// `routed_scaling_factor` (DeepSeek: the multiplier of the routing weights).
    pub routed_scaling_factor: Option<f64>,
    /// `moe_layer_freq` (A.X-K1: of the layers from `first_k_dense_replace` on, those whose index
    /// it divides have experts).
    pub moe_layer_freq: Option<i64>,
    /// `use_gated_attention` (MiniCPM5-MoE: must not be false, its attention is gated).
    pub use_gated_attention: Option<bool>,
    /// `router_scaling_factor` (HY-V3: the multiplier of the renormalised routing weights).
    pub router_scaling_factor: Option<f64>,
    /// `first_k_dense_replace` (DeepSeek: the leading layers with a dense MLP).
    pub first_k_dense_replace: Option<i64>,
    /// `mlp_layer_types` (Mellum, glm4_moe_lite: `dense` or `sparse`, the MLP of each layer).
    pub mlp_layer_types: Option<Vec<String>>,
    /// `prefix_dense_sliding_window_pattern` (Cohere 2 MoE: the sliding pattern of the leading
    /// dense layers; 1: none slides, every one rotates).
    pub prefix_dense_sliding_window_pattern: Option<i64>,
    /// `prefix_dense_intermediate_size` (Cohere 2 MoE: the leading dense layers' MLP width;
    /// `null` for `intermediate_size`).
    #[serde(default, deserialize_with = "nullable")]
    pub prefix_dense_intermediate_size: Option<Option<i64>>,
    /// `expert_selection_fn` (Cohere 2 MoE: `softmax` or `sigmoid` of the top-k logits).
    pub expert_selection_fn: Option<String>,
    /// `shared_expert_combination_strategy` (Cohere 2 MoE: `sum` or `average` of the routed
    /// and shared experts).
    pub shared_expert_combination_strategy: Option<String>,
    /// `scale_emb` (MiniCPM3: the multiplier of the token embeddings).
    pub scale_emb: Option<f64>,
    /// `scale_depth` (MiniCPM3: residual branches are scaled by it over √layers; `null` for
    /// none).
    #[serde(default, deserialize_with = "present")]
    pub scale_depth: Option<Value>,
    /// `intermediate_size_mlp` (Llama 4: the dense layers' MLP width).
    pub intermediate_size_mlp: Option<i64>,
    /// `moe_layers` (Llama 4: the layers with experts).
    pub moe_layers: Option<Vec<i64>>,
    /// `interleave_moe_layer_step` (Llama 4: every n-th layer has experts without `moe_layers`).
    pub interleave_moe_layer_step: Option<i64>,
    /// `attention_chunk_size` (Llama 4: the chunk of the chunked-attention layers; `null` for
    /// none).
    #[serde(default, deserialize_with = "nullable")]
    pub attention_chunk_size: Option<Option<i64>>,
    /// `attn_temperature_tuning` (Llama 4: NoPE layers scale q up with the position).
    pub attn_temperature_tuning: Option<bool>,
    /// `floor_scale` (Llama 4: the positions per step of the temperature tuning).
    pub floor_scale: Option<f64>,
    /// `attn_scale` (Llama 4: the strength of the temperature tuning).
    pub attn_scale: Option<f64>,
    /// `num_dense_layers` (AFMoE: the leading layers with a dense MLP).
    pub num_dense_layers: Option<i64>,
    /// `route_scale` (AFMoE: the multiplier of the routing weights).
    pub route_scale: Option<f64>,
    /// `global_attn_every_n_layers` (AFMoE: every n-th layer attends to every key; ModernBERT:
    /// every n-th layer, from the first, is global).
    pub global_attn_every_n_layers: Option<i64>,
    /// `mup_enabled` (AFMoE: the token embeddings times √hidden_size).
    pub mup_enabled: Option<bool>,
    /// `dim_model_base` (MiniCPM3: the final hidden states are divided by `hidden_size` over
    /// it; `null` for none).
    #[serde(default, deserialize_with = "present")]
    pub dim_model_base: Option<Value>,
    /// `state_size` (Mamba2: the SSM state per head and channel).
    pub state_size: Option<i64>,
    /// `n_groups` (Mamba2: groups of heads sharing the SSM's `B` and `C`).
    pub n_groups: Option<i64>,
    /// `expand` (Mamba2: the mixer's width over `hidden_size`).
    pub expand: Option<i64>,
    /// `conv_kernel` (Mamba2: the kernel width of its convolution).
    pub conv_kernel: Option<i64>,
    /// `use_conv_bias` (Mamba2: a bias on its convolution).
    pub use_conv_bias: Option<bool>,
    /// `time_step_limit` (Mamba2: the clamp of the time steps; Python writes its default as
    /// `[0.0, Infinity]`, read as `[0.0, "Infinity"]`).
    #[serde(default, deserialize_with = "present")]
    pub time_step_limit: Option<Value>,
    /// `mamba_n_heads` (Bamba, Granite-4: the SSM heads of a Mamba2 layer).
    pub mamba_n_heads: Option<i64>,
    /// `mamba_d_head` (Bamba, Granite-4: channels per SSM head; `"auto"` derives it).
    pub mamba_d_head: Option<Value>,
    /// `mamba_n_groups` (Bamba, Granite-4: groups of heads sharing `B` and `C`).
    pub mamba_n_groups: Option<i64>,
    /// `mamba_d_state` (Bamba, Granite-4: the SSM state per head and channel).
    pub mamba_d_state: Option<i64>,
    /// `mamba_d_conv` (Bamba, Granite-4: the kernel width of the mixer's convolution).
    pub mamba_d_conv: Option<i64>,
    /// `mamba_expand` (Bamba, Granite-4: the mixer's width over `hidden_size`).
    pub mamba_expand: Option<i64>,
    /// `mamba_conv_bias` (Bamba, Granite-4: a bias on the mixer's convolution).
    pub mamba_conv_bias: Option<bool>,
    /// `mamba_proj_bias` (Bamba, Granite-4: biases on the mixer's `in_proj` and `out_proj`).
    pub mamba_proj_bias: Option<bool>,
    /// `attn_layer_indices` (Bamba: the attention layers; every other layer is Mamba2).
    pub attn_layer_indices: Option<Vec<i64>>,
    /// `time_step_rank` (Mamba: the width of the time-step projection's input; `"auto"` for
    /// `⌈hidden_size / 16⌉`).
    pub time_step_rank: Option<Value>,
    /// `mixer_rms_eps` (FalconMamba: the epsilon of the weightless RMS norms on `B`, `C` and
    /// the time steps).
    pub mixer_rms_eps: Option<f64>,
    /// `linear_conv_kernel_dim` (Qwen3-Next, Qwen3.5: the kernel width of a linear-attention
    /// layer's convolution).
    pub linear_conv_kernel_dim: Option<i64>,
    /// `linear_key_head_dim` (Qwen3-Next, Qwen3.5: channels per linear-attention key head).
    pub linear_key_head_dim: Option<i64>,
    /// `linear_value_head_dim` (Qwen3-Next, Qwen3.5: channels per linear-attention value head).
    pub linear_value_head_dim: Option<i64>,
    /// `linear_num_key_heads` (Qwen3-Next, Qwen3.5: linear-attention query/key heads).
    pub linear_num_key_heads: Option<i64>,
    /// `linear_num_value_heads` (Qwen3-Next, Qwen3.5: linear-attention value heads).
    pub linear_num_value_heads: Option<i64>,
    /// `full_attention_interval` (Qwen3-Next, Qwen3.5 without `layer_types`: every n-th layer
    /// attends, the others are linear attention).
    pub full_attention_interval: Option<i64>,
    /// `conv_L_cache` (LFM2: the kernel width of its short convolutions).
    #[serde(rename = "conv_L_cache")]
    pub conv_l_cache: Option<i64>,
    /// `conv_bias` (LFM2: biases on the short convolutions and their projections).
    pub conv_bias: Option<bool>,
    /// `full_attn_idxs` (LFM2: the attention layers where `layer_types` is absent).
    pub full_attn_idxs: Option<Vec<i64>>,
    /// `block_auto_adjust_ff_dim` (LFM2: the MLP width is derived from `intermediate_size`).
    pub block_auto_adjust_ff_dim: Option<bool>,
    /// `block_ffn_dim_multiplier` (LFM2): `Some(Value::Null)` when written as `null` (no
    /// multiplier and no rounding), `None` when absent (1.0).
    #[serde(default, deserialize_with = "present")]
    pub block_ffn_dim_multiplier: Option<Value>,
    /// `block_multiple_of` (LFM2: the MLP width is rounded up to a multiple of it).
    pub block_multiple_of: Option<i64>,
    /// `block_ff_dim` (LFM2's old spelling of `intermediate_size`).
    pub block_ff_dim: Option<i64>,
    /// `tie_embedding` (LFM2's old spelling of `tie_word_embeddings`).
    pub tie_embedding: Option<bool>,
    /// `keep_window_size` (Doge: the keys each query keeps by its dynamic mask).
    pub keep_window_size: Option<i64>,
    /// `is_moe` (Doge: a cross-domain mixture of experts instead of the MLP).
    pub is_moe: Option<bool>,
    /// `kv_channels` (JetMoE: the head dim, `head_dim` its alias).
    pub kv_channels: Option<i64>,
    /// `norm_bias` (ModernBERT: its LayerNorms have a bias).
    pub norm_bias: Option<bool>,
    /// `decoder_bias` (ModernBERT: the output projection has a bias).
    pub decoder_bias: Option<bool>,
    /// `classifier_bias` (ModernBERT: the LM head's dense layer has a bias).
    pub classifier_bias: Option<bool>,
    /// `classifier_activation` (ModernBERT: the LM head's activation).
    pub classifier_activation: Option<String>,
    /// `local_attention` (ModernBERT: the local layers' attention span, twice their window;
    /// `null` for none).
    #[serde(default, deserialize_with = "nullable")]
    pub local_attention: Option<Option<i64>>,
    /// `global_rope_theta` (ModernBERT, transformers v4: the global layers' RoPE theta).
    pub global_rope_theta: Option<f64>,
    /// `local_rope_theta` (ModernBERT, transformers v4: the local layers' RoPE theta).
    pub local_rope_theta: Option<f64>,
    /// `concat_input` (RoCBert: the shape and pronunciation embeddings are concatenated to
    /// the word embedding and mapped back to the hidden size).
    pub concat_input: Option<bool>,
    /// `enable_shape` (RoCBert: the shape embedding is used).
    pub enable_shape: Option<bool>,
    /// `enable_pronunciation` (RoCBert: the pronunciation embedding is used).
    pub enable_pronunciation: Option<bool>,
    /// `shape_embed_dim` (RoCBert: the shape embedding's width).
    pub shape_embed_dim: Option<i64>,
    /// `pronunciation_embed_dim` (RoCBert: the pronunciation embedding's width).
    pub pronunciation_embed_dim: Option<i64>,
    /// `shape_vocab_size` (RoCBert: the shape embedding's rows).
    pub shape_vocab_size: Option<i64>,
    /// `pronunciation_vocab_size` (RoCBert: the pronunciation embedding's rows).
    pub pronunciation_vocab_size: Option<i64>,
    /// `num_attention_heads_per_layer` (Laguna: each layer's query heads).
    pub num_attention_heads_per_layer: Option<Vec<i64>>,
    /// `gating` (Laguna: the attention output gate's granularity, `true`/`"per-head"` or
    /// `"per-element"`).
    pub gating: Option<Value>,
    /// `moe_routed_scaling_factor` (Laguna: the multiplier of the routed experts' sum).
    pub moe_routed_scaling_factor: Option<f64>,
    /// `moe_router_logit_softcapping` (Laguna: the router logits' tanh soft-cap, 0 for none).
    pub moe_router_logit_softcapping: Option<f64>,
    /// `moe_apply_router_weight_on_input` (Laguna: routing weights applied to the experts'
    /// input; transformers refuses `true`).
    pub moe_apply_router_weight_on_input: Option<bool>,
    /// `sliding_window_size` (MiMo-V2-Flash's reference spelling: the tokens a sliding layer
    /// sees before the query, one less than its `sliding_window`).
    pub sliding_window_size: Option<i64>,
    /// `attention_value_scale` (MiMo-V2-Flash: the v multiplier); absent and null differ
    /// (absent = the default, null = 1).
    #[serde(default, deserialize_with = "present")]
    pub attention_value_scale: Option<Value>,
    /// `first_dense_intermediate_size` (Ergo: the dense layers' MLP width).
    pub first_dense_intermediate_size: Option<i64>,
    /// `num_dense_blocks` (Ergo: the leading layers with a dense MLP).
    pub num_dense_blocks: Option<i64>,
    /// `global_attention_every_n_layers` (Ergo: every n-th layer attends to the whole context).
    pub global_attention_every_n_layers: Option<i64>,
    /// `global_attention_scale` (Ergo: the full layers' attention logits multiplier).
    pub global_attention_scale: Option<f64>,
    /// `local_attention_window` (Ergo's alias of `sliding_window`).
    pub local_attention_window: Option<i64>,
    /// `zero_expert_num` (LongCat-Flash: the router's identity experts; null for none).
    #[serde(default, deserialize_with = "nullable")]
    pub zero_expert_num: Option<Option<i64>>,
    /// `expert_ffn_hidden_size` (LongCat-Flash: each routed expert's width).
    pub expert_ffn_hidden_size: Option<i64>,
    /// `qk_head_dim` (LongCat-Flash: the q/k channels per head, their nope plus rope).
    pub qk_head_dim: Option<i64>,
    /// `layers_block_type` (Nemotron-H: per layer `linear_attention` (Mamba2),
    /// `full_attention`, `mlp` or `moe`; `layer_types` its alias).
    pub layers_block_type: Option<Vec<String>>,
    /// `hybrid_override_pattern` (Nemotron-H's older spelling of `layers_block_type`: one
    /// character per layer, `M` Mamba2, `*` attention, `-` MLP, `E` MoE).
    pub hybrid_override_pattern: Option<String>,
    /// `mamba_num_heads` (Nemotron-H: the SSM heads of a Mamba2 layer).
    pub mamba_num_heads: Option<i64>,
    /// `mamba_head_dim` (Nemotron-H: channels per SSM head).
    pub mamba_head_dim: Option<i64>,
    /// `ssm_state_size` (Nemotron-H: the SSM state per head and channel).
    pub ssm_state_size: Option<i64>,
    /// `mamba_hidden_act` (Nemotron-H: the activation after the mixer's convolution).
    pub mamba_hidden_act: Option<String>,
    /// `mlp_hidden_act` (Nemotron-H: the MLP's and the experts' activation).
    pub mlp_hidden_act: Option<String>,
    /// `moe_shared_expert_intermediate_size` (Nemotron-H: the shared expert's width).
    pub moe_shared_expert_intermediate_size: Option<i64>,
    /// `moe_latent_size` (Nemotron-H: the experts' latent width; `null` for none).
    #[serde(default, deserialize_with = "nullable")]
    pub moe_latent_size: Option<Option<i64>>,
    /// `attn_layer_period` (Jamba: one attention layer in this many).
    pub attn_layer_period: Option<i64>,
    /// `attn_layer_offset` (Jamba: the first attention layer).
    pub attn_layer_offset: Option<i64>,
    /// `expert_layer_period` (Jamba: one MoE layer in this many).
    pub expert_layer_period: Option<i64>,
    /// `expert_layer_offset` (Jamba: the first MoE layer).
    pub expert_layer_offset: Option<i64>,
    /// `mamba_dt_rank` (Jamba: the time-step projection's rank; `"auto"` for
    /// `⌈hidden_size / 16⌉`).
    pub mamba_dt_rank: Option<Value>,
    /// `global_head_dim` (Gemma 4: the full-attention layers' head size).
    pub global_head_dim: Option<i64>,
    /// `num_global_key_value_heads` (Gemma 4: the full-attention layers' key/value heads
    /// where `attention_k_eq_v`); absent and null differ only in being absent.
    #[serde(default, deserialize_with = "nullable")]
    pub num_global_key_value_heads: Option<Option<i64>>,
    /// `per_layer_config` (transformers 5's heterogeneous configs: per layer index, the
    /// attributes that differ from the global ones).
    pub per_layer_config: Option<Value>,
    /// `attention_k_eq_v` (Gemma 4: the full layers' keys serve as their values).
    pub attention_k_eq_v: Option<bool>,
    /// `num_kv_shared_layers` (Gemma 4, Gemma 3n: the last layers reuse an earlier layer's
    /// keys and values).
    pub num_kv_shared_layers: Option<i64>,
    /// `hidden_size_per_layer_input` (Gemma 4, Gemma 3n: the width of each layer's per-layer
    /// input; 0 or null for none).
    #[serde(default, deserialize_with = "nullable")]
    pub hidden_size_per_layer_input: Option<Option<i64>>,
    /// `vocab_size_per_layer_input` (Gemma 4, Gemma 3n: the rows of the per-layer embedding).
    pub vocab_size_per_layer_input: Option<i64>,
    /// `use_double_wide_mlp` (Gemma 4: twice `intermediate_size` in the KV-sharing layers).
    pub use_double_wide_mlp: Option<bool>,
    /// `enable_moe_block` (Gemma 4: a mixture of experts beside each layer's MLP).
    pub enable_moe_block: Option<bool>,
    /// `altup_num_inputs` (Gemma 3n: the AltUp streams).
    pub altup_num_inputs: Option<i64>,
    /// `altup_active_idx` (Gemma 3n: the stream the layers compute on).
    pub altup_active_idx: Option<i64>,
    /// `altup_correct_scale` (Gemma 3n: the corrected active stream is scaled by
    /// `correct_output_scale` before the per-layer gate).
    pub altup_correct_scale: Option<bool>,
    /// `laurel_rank` (Gemma 3n: the rank of the low-rank residual).
    pub laurel_rank: Option<i64>,
    /// `activation_sparsity_pattern` (Gemma 3n: per layer, the share of MLP gate activations
    /// zeroed; one number, a list or null).
    pub activation_sparsity_pattern: Option<Value>,
    /// `gated_norm_rank` (A.X-K2: the bottleneck of the sigmoid gate after its gated RMSNorms).
    pub gated_norm_rank: Option<i64>,
    /// `index_topk` (DeepSeek Sparse Attention: the keys each query's indexer selects).
    pub index_topk: Option<i64>,
    /// `index_head_dim` (DeepSeek Sparse Attention: the indexer's channels per head, its
    /// cached key's width).
    pub index_head_dim: Option<i64>,
    /// `index_n_heads` (DeepSeek Sparse Attention: the indexer's query heads).
    pub index_n_heads: Option<i64>,
    /// `indexer_types` (GLM-MoE-DSA: per layer, `full` runs its own indexer, `shared` reuses the
    /// previous full layer's selection).
    pub indexer_types: Option<Vec<String>>,
    /// `index_topk_pattern` (GLM-MoE-DSA: `indexer_types` spelled `F`/`S` per layer, or a list).
    pub index_topk_pattern: Option<Value>,
    /// `index_topk_freq` (GLM-MoE-DSA: every this many layers from the offset runs an indexer).
    pub index_topk_freq: Option<i64>,
    /// `index_skip_topk_offset` (GLM-MoE-DSA: where `index_topk_freq`'s schedule starts).
    pub index_skip_topk_offset: Option<i64>,
    /// `cross_attention_layers` (Mllama's text decoder: the indices of its cross-attention
    /// layers, which text-only inputs skip).
    pub cross_attention_layers: Option<Vec<i64>>,
    /// `block_types` (RecurrentGemma: `recurrent` / `attention`, cycled over the layers).
    pub block_types: Option<Vec<String>>,
    /// `lru_width` (RecurrentGemma: the recurrent block's width; absent or null → hidden_size).
    pub lru_width: Option<i64>,
    /// `conv1d_width` (RecurrentGemma: the kernel width of the recurrent block's convolution).
    pub conv1d_width: Option<i64>,
    /// `attention_window_size` (RecurrentGemma: the local attention's window).
    pub attention_window_size: Option<i64>,
    /// `logits_soft_cap` (RecurrentGemma: logits become `c · tanh(logits / c)`).
    pub logits_soft_cap: Option<f64>,
    /// `mamba_d_ssm` (Falcon-H1: the mixer's width; null → `mamba_expand · hidden_size`,
    /// absent → 1024).
    #[serde(default, deserialize_with = "nullable")]
    pub mamba_d_ssm: Option<Option<i64>>,
    /// `mamba_rms_norm` (Falcon-H1: whether the mixer norms its gated output).
    pub mamba_rms_norm: Option<bool>,
    /// `mamba_norm_before_gate` (Falcon-H1: the mixer's norm before its gate).
    pub mamba_norm_before_gate: Option<bool>,
    /// `projectors_bias` (Falcon-H1: a bias on the mixer's `out_proj`).
    pub projectors_bias: Option<bool>,
    /// `lm_head_multiplier` (Falcon-H1: scales the logits).
    pub lm_head_multiplier: Option<f64>,
    /// `mlp_multipliers` (Falcon-H1: the MLP's gate and down-projection multipliers).
    pub mlp_multipliers: Option<Vec<f64>>,
    /// `key_multiplier` (Falcon-H1: scales the keys).
    pub key_multiplier: Option<f64>,
    /// `attention_in_multiplier` (Falcon-H1: scales the attention's input).
    pub attention_in_multiplier: Option<f64>,
    /// `attention_out_multiplier` (Falcon-H1: scales the attention's output).
    pub attention_out_multiplier: Option<f64>,
    /// `ssm_multipliers` (Falcon-H1: the µP multipliers of the mixer's `in_proj` parts z, x,
    /// B, C, dt).
    pub ssm_multipliers: Option<Vec<f64>>,
    /// `ssm_in_multiplier` (Falcon-H1: scales the mixer's input).
    pub ssm_in_multiplier: Option<f64>,
    /// `ssm_out_multiplier` (Falcon-H1: scales the mixer's output).
    pub ssm_out_multiplier: Option<f64>,
    /// `n_mamba_heads` (Zamba2: the SSM heads of a Mamba2 layer).
    pub n_mamba_heads: Option<i64>,
    /// `mamba_ngroups` (Zamba2: groups of heads sharing `B` and `C`).
    pub mamba_ngroups: Option<i64>,
    /// `add_bias_linear` (Zamba2: biases on the mixers' projections and the shared MLP).
    pub add_bias_linear: Option<bool>,
    /// `num_mem_blocks` (Zamba2: the distinct shared transformer blocks, used in turn).
    pub num_mem_blocks: Option<i64>,
    /// `use_shared_attention_adapter` (Zamba2: LoRA adapters on q, k and v per use).
    pub use_shared_attention_adapter: Option<bool>,
    /// `adapter_rank` (Zamba2: the adapters' rank).
    pub adapter_rank: Option<i64>,
    /// `use_mem_rope` (Zamba2: whether the shared attention rotates q and k).
    pub use_mem_rope: Option<bool>,
    /// `use_long_context` (Zamba2: a longer context with a rescaled RoPE).
    pub use_long_context: Option<bool>,
    /// `time_step_min` (Zamba2: the lower clamp of the mixers' time steps).
    pub time_step_min: Option<f64>,
}

/// Deserializes a field that may be `null` as `Some(Value::Null)`, so that an explicit null
/// differs from an absent field (`None`, by `#[serde(default)]`).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// Deserializes a field that may be `null` as `Some(None)`, so that an explicit null differs
/// from an absent field (`None`, by `#[serde(default)]`).
fn nullable<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<i64>>, D::Error> {
    Option::<i64>::deserialize(d).map(Some)
}

/// Deserializes a width given as one integer or as a list of integers (one per layer) that are
/// all equal, as that integer; a list of different widths is refused.
fn width_or_widths<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Width {
        One(i64),
        PerLayer(Vec<i64>),
    }
    match Option::<Width>::deserialize(d)? {
        None => Ok(None),
        Some(Width::One(w)) => Ok(Some(w)),
        Some(Width::PerLayer(ws)) => match ws.split_first() {
            Some((&w, rest)) if rest.iter().all(|&r| r == w) => Ok(Some(w)),
            _ => Err(serde::de::Error::custom(format!(
                "intermediate_size {ws:?}: expected an integer or a list of equal integers \
                 (layers of different MLP widths are not supported)"
            ))),
        },
    }
}
