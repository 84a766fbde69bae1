#!/usr/bin/env python3
"""Generate the tiny Hugging Face checkpoints under tests/fixtures/.

Developer tool only: it needs torch, transformers and tokenizers (see
tests/fixtures/README.md).  CI never runs it; the generated folders are
committed.  Everything is seeded, so re-running it reproduces the same files
(modulo library versions).

Usage:
    python scripts/make_fixtures.py [--out tests/fixtures] [--only NAME ...]

Each fixture folder gets:
    config.json, generation_config.json, model.safetensors (or shards +
    model.safetensors.index.json), tokenizer.json, tokenizer_config.json,
    (special_tokens_map.json if transformers writes it), reference.json

reference.json schema (all floats rounded to 9 significant digits):
    {
      "prompt": str,                     # text fed to the tokenizer
      "input_ids": [int, ...],           # tokenizer(prompt), no BOS added
      "logits": [[float]*vocab]*len(input_ids),  # f32 forward, batch 1
      "greedy_tokens": [int]*32,         # new tokens of greedy decoding (f32)
      "dtype": "f32" | "bf16",           # dtype of the stored checkpoint
      "seed": int,                       # torch seed the weights came from
      "min_top2_gap": float,             # min over the prompt's last position and
                                         # every greedy step of top1 - top2 logit
      "vocab_size": int,
      "transformers_version": str, "torch_version": str
    }

Fixtures in CACHED_GREEDY (dynamic NTK RoPE) take their greedy tokens from transformers'
KV-cache generate, and add "generation_logits" ([[float]*vocab]*32, each step's logits) and
"long_prompt" ({"input_ids", "logits"} of one forward over twice the original context).

For the bf16 checkpoint the reference logits and greedy tokens are computed
with the bf16 weights upcast to f32 (exact), running in f32.  An f32 build of a
bf16 checkpoint upconverts the weights exactly, so it must match the f32
reference with the same tolerance as an f32 checkpoint.
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
import os
import shutil
import sys
from pathlib import Path

import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    Lfm2Config,
    Lfm2ForCausalLM,
    Lfm2MoeConfig,
    Lfm2MoeForCausalLM,
    Qwen3NextConfig,
    Qwen3NextForCausalLM,
    Qwen3_5Config,
    Qwen3_5ForCausalLM,
    Qwen3_5ForConditionalGeneration,
    Qwen3_5MoeConfig,
    Qwen3_5MoeForCausalLM,
    Qwen3_5MoeForConditionalGeneration,
    Qwen3_5MoeTextConfig,
    Qwen3_5TextConfig,
    Mamba2Config,
    Mamba2ForCausalLM,
    BambaConfig,
    BambaForCausalLM,
    FalconH1Config,
    FalconH1ForCausalLM,
    Zamba2Config,
    Zamba2ForCausalLM,
    NemotronHConfig,
    NemotronHForCausalLM,
    JambaConfig,
    JambaForCausalLM,
    GraniteMoeHybridConfig,
    GraniteMoeHybridForCausalLM,
    MambaConfig,
    MambaForCausalLM,
    FalconMambaConfig,
    FalconMambaForCausalLM,
    ApertusConfig,
    ApertusForCausalLM,
    Apertus1p5TextConfig,
    Apertus1p5TextForCausalLM,
    ArceeConfig,
    ArceeForCausalLM,
    SolarOpenConfig,
    SolarOpenForCausalLM,
    ExaoneMoeConfig,
    ExaoneMoeForCausalLM,
    Cohere2MoeConfig,
    Cohere2MoeForCausalLM,
    DiffLlamaConfig,
    DiffLlamaForCausalLM,
    DogeConfig,
    DogeForCausalLM,
    JetMoeConfig,
    JetMoeForCausalLM,
    ModernBertDecoderConfig,
    ModernBertDecoderForCausalLM,
    MellumConfig,
    MellumForCausalLM,
    VaultGemmaConfig,
    VaultGemmaForCausalLM,
    Ministral3Config,
    Ministral3ForCausalLM,
    GraniteSWAConfig,
    GraniteSWAForCausalLM,
    GraniteMoeSharedConfig,
    GraniteMoeSharedForCausalLM,
    GraniteMoeSWAConfig,
    GraniteMoeSWAForCausalLM,
    FlexOlmoConfig,
    FlexOlmoForCausalLM,
    Jais2Config,
    Jais2ForCausalLM,
    NanoChatConfig,
    NanoChatForCausalLM,
    BitNetConfig,
    BitNetForCausalLM,
    IQuestCoderConfig,
    HyperCLOVAXConfig,
    HyperCLOVAXForCausalLM,
    BertConfig,
    BloomConfig,
    BloomForCausalLM,
    BertModel,
    BioGptConfig,
    BioGptForCausalLM,
    GlmConfig,
    GlmForCausalLM,
    Glm4Config,
    Glm4ForCausalLM,
    Gemma2Config,
    Gemma2ForCausalLM,
    Gemma3Config,
    Gemma3ForCausalLM,
    Gemma3nForCausalLM,
    Gemma4ForCausalLM,
    Gemma4UnifiedForCausalLM,
    Gemma3ForConditionalGeneration,
    Gemma3TextConfig,
    Gemma3nTextConfig,
    Gemma4TextConfig,
    Gemma4UnifiedTextConfig,
    GemmaConfig,
    GemmaForCausalLM,
    GenerationConfig,
    GPT2Config,
    GPT2LMHeadModel,
    GPTBigCodeConfig,
    GPTBigCodeForCausalLM,
    GPTJConfig,
    GPTJForCausalLM,
    GPTNeoConfig,
    GPTNeoForCausalLM,
    GPTNeoXConfig,
    GPTNeoXJapaneseConfig,
    GPTNeoXJapaneseForCausalLM,
    GPTNeoXForCausalLM,
    GraniteConfig,
    GraniteForCausalLM,
    GraniteMoeConfig,
    GraniteMoeForCausalLM,
    GptOssConfig,
    GptOssForCausalLM,
    HeliumConfig,
    HeliumForCausalLM,
    HunYuanDenseV1Config,
    HunYuanDenseV1ForCausalLM,
    InternLM3Config,
    MinistralConfig,
    MinistralForCausalLM,
    StableLmConfig,
    StableLmForCausalLM,
    Starcoder2Config,
    Starcoder2ForCausalLM,
    OlmoConfig,
    OPTConfig,
    XGLMConfig,
    XGLMForCausalLM,
    OPTForCausalLM,
    OlmoForCausalLM,
    Olmo2Config,
    Olmo2ForCausalLM,
    Olmo3Config,
    Olmo3ForCausalLM,
    OlmoeConfig,
    OlmoeForCausalLM,
    Phi3Config,
    Phi3ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
    SmolLM3Config,
    SmolLM3ForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    Mistral3Config,
    Mistral3ForConditionalGeneration,
    MistralConfig,
    PixtralVisionConfig,
    SiglipVisionConfig,
    MistralForCausalLM,
    DeepseekV2Config,
    DeepseekV2ForCausalLM,
    DeepseekV3Config,
    LongcatFlashConfig,
    LongcatFlashForCausalLM,
    DeepseekV3ForCausalLM,
    Dots1Config,
    Dots1ForCausalLM,
    Glm4MoeConfig,
    Glm4MoeForCausalLM,
    Glm4MoeLiteConfig,
    SarvamMoEConfig,
    HYV3Config,
    AXK1Config,
    AXK1ForCausalLM,
    MiniCPM5MoeConfig,
    MiniCPM5MoeForCausalLM,
    HYV3ForCausalLM,
    Param2MoeConfig,
    Glm4MoeLiteForCausalLM,
    MiniCPM3Config,
    MiniCPM3ForCausalLM,
    SarvamMLAConfig,
    YoutuConfig,
    YoutuForCausalLM,
    Llama4TextConfig,
    Llama4ForCausalLM,
    AfmoeConfig,
    AfmoeForCausalLM,
    AriaTextConfig,
    AriaTextForCausalLM,
    Kolibri1Config,
    Kolibri1ForCausalLM,
    FlintConfig,
    FlintForCausalLM,
    LagunaConfig,
    LagunaForCausalLM,
    BeamConfig,
    BeamForCausalLM,
    MiMoV2FlashConfig,
    MiMoV2FlashForCausalLM,
    ErgoConfig,
    ErgoForCausalLM,
    MixtralConfig,
    MixtralForCausalLM,
    MptConfig,
    MptForCausalLM,
    PhimoeConfig,
    PhimoeForCausalLM,
    CohereConfig,
    CwmConfig,
    CwmForCausalLM,
    CohereForCausalLM,
    CodeGenConfig,
    CTRLConfig,
    CTRLLMHeadModel,
    CodeGenForCausalLM,
    Ernie4_5Config,
    Ernie4_5ForCausalLM,
    Ernie4_5_MoeConfig,
    Ernie4_5_MoeForCausalLM,
    MiniMaxM2Config,
    MiniMaxM2ForCausalLM,
    HunYuanMoEV1Config,
    HunYuanMoEV1ForCausalLM,
    DbrxConfig,
    DbrxForCausalLM,
    Cohere2Config,
    Cohere2ForCausalLM,
    CohereCompassForCausalLM,
    CohereCompassTextConfig,
    ExaoneConfig,
    Exaone4Config,
    Exaone4ForCausalLM,
    FalconConfig,
    FalconForCausalLM,
    NemotronConfig,
    NemotronForCausalLM,
    OpenAIGPTConfig,
    OpenAIGPTLMHeadModel,
    PersimmonConfig,
    PersimmonForCausalLM,
    PhiConfig,
    PhiForCausalLM,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
    Emu3ForCausalLM,
    Emu3TextConfig,
    MllamaForCausalLM,
    MllamaTextConfig,
    SeedOssConfig,
    SeedOssForCausalLM,
    Qwen2MoeConfig,
    Qwen2MoeForCausalLM,
    Qwen3MoeConfig,
    Qwen3MoeForCausalLM,
    RobertaConfig,
    RobertaModel,
)

REPO = Path(__file__).resolve().parent.parent

BOS, EOS, PAD = "<|bos|>", "<|eos|>", "<|pad|>"
SPECIALS = [PAD, BOS, EOS]  # ids 0, 1, 2
N_MERGES = 41  # vocab = 3 specials + 256 bytes + 41 merges = 300

TRAIN_TEXT = """\
The quick brown fox jumps over the lazy dog. The dog sleeps in the sun while the
fox runs into the forest. In the morning the farmer walks to the field and the
cat sits on the mat by the door. She sells sea shells on the sea shore, and the
shells that she sells are sea shells for sure. A small model is a model that
fits in a test. The weather is nice and the birds sing in the trees. When the
rain comes, the children run inside and read their books by the fire. There is
nothing either good or bad, but thinking makes it so. All that glitters is not
gold; all who wander are not lost. The rain in Spain stays mainly in the plain.
"""

PROMPT = "The cat sat on the mat and"
N_NEW = 32
MIN_GAP = 1e-2  # stricter than the 1e-3 floor, for margin against f32 reorderings

PHI3_ORIGINAL_MAX = 8  # phi3: shorter than the prompt, so its reference uses the long factors
YARN_ORIGINAL_MAX = 32  # qwen2-yarn: shorter than prompt + generation
PHIMOE_ORIGINAL_MAX = 64  # phimoe: longer than prompt + generation (short LongRoPE factors)
DYNAMIC_ORIGINAL_MAX = 32  # llama-dynamic: max_position_embeddings, crossed by the generation
# Routers whose score-correction bias the fixtures perturb by 0.1 (the others: 0.15).
DEEPSEEK_ROUTED = {
    "deepseek_v3", "deepseek_v2", "sarvam_mla", "glm4_moe", "glm4_moe_lite", "dots1", "exaone_moe",
    "sarvam_moe", "param2moe", "hy_v3", "minicpm5_moe", "deepseek_v32", "glm_moe_dsa", "axk2",
}
# Routers whose score-correction bias stays zero: A.X-K1's released checkpoints have none and
# transformers routes them with zeros (mobius adds no correction).
UNCORRECTED = {"axk1"}
DYNAMIC_FACTOR = 2.0
# Fixtures whose reference greedy tokens come from transformers' KV-cache generate rather than
# cache-free forwards: with dynamic NTK RoPE the two differ once the length passes the original
# context (each cached step rotates its new keys with its own base; a full forward re-rotates
# every key with the base of the whole length).
CACHED_GREEDY = {"llama-dynamic"}
# Fixtures whose pad token's embedding row (and so their tied head's row) is stored as zero:
# transformers 5.25's YoutuPreTrainedModel._init_weights zeroes that row even on loading a
# checkpoint (it writes through `weight.data[padding_idx]`, which escapes the guard that keeps
# loaded weights), so a nonzero row would give references that depend on how the model was made.
ZERO_PAD_ROW = {"youtu"}
# Hybrid decoders (layers carrying a recurrent or conv state besides the KV cache): their
# reference.json says task "hybrid-text-generation" (tests/ort/test_hybrid.py) and adds
# "decode_steps", the logits of HYBRID_DECODE_STEPS greedy tokens fed one at a time with
# transformers' cache after the prompt.
HYBRID = {"lfm2", "lfm2_moe", "mamba2", "bamba", "granitemoehybrid", "mamba", "falcon_mamba", "nemotron_h", "jamba",
          "falcon_h1", "zamba2",
          "qwen3_next", "qwen3_5_text", "qwen3_5_moe_text", "qwen3_5", "qwen3_5_moe", "recurrent_gemma",
          "deepseek_v32", "glm_moe_dsa", "axk2"}
HYBRID_DECODE_STEPS = 8
# DeepSeek Sparse Attention (hybrid-text-generation: the indexer's key cache is carried beside
# the KV cache): index_topk is below the prompt's length, and the fixture is checked to depend on
# the selection (its logits move by more than SPARSE_MIN_EFFECT when every key is kept).
SPARSE_ATTENTION = {"deepseek_v32", "glm_moe_dsa", "axk2"}
SPARSE_MIN_EFFECT = 1e-2

DIMS = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=128,
)


# --------------------------------------------------------------------------
# tokenizer
# --------------------------------------------------------------------------
def build_tokenizer(specials: list[str] = SPECIALS) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=len(specials) + 256 + N_MERGES,
        min_frequency=2,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([TRAIN_TEXT], trainer=trainer)
    assert tok.get_vocab_size() == len(specials) + 256 + N_MERGES, tok.get_vocab_size()
    for i, s in enumerate(specials):
        assert tok.token_to_id(s) == i
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        clean_up_tokenization_spaces=False,
        model_max_length=DIMS["max_position_embeddings"],
    )
    return fast


# --------------------------------------------------------------------------
# models
# --------------------------------------------------------------------------
def special_ids(tok):
    return dict(
        bos_token_id=tok.convert_tokens_to_ids(BOS),
        eos_token_id=tok.convert_tokens_to_ids(EOS),
        pad_token_id=tok.convert_tokens_to_ids(PAD),
    )


class SarvamMLAForCausalLM(DeepseekV3ForCausalLM):
    """The class transformers' auto mapping gives `sarvam_mla` (DeepseekV3ForCausalLM), reading
    its config as SarvamMLAConfig (which maps the original config's names)."""

    config_class = SarvamMLAConfig


class SarvamMoeForCausalLM(Glm4MoeForCausalLM):
    """The class transformers' auto mapping gives `sarvam_moe` (Glm4MoeForCausalLM), reading its
    config as SarvamMoEConfig (its own defaults, the original config's names)."""

    config_class = SarvamMoEConfig


class Param2MoeForCausalLM(Glm4MoeForCausalLM):
    """The class transformers' auto mapping gives `param2moe` (Glm4MoeForCausalLM), reading its
    config as Param2MoeConfig."""

    config_class = Param2MoeConfig


def make_config(kind: str, vocab: int, ids: dict):
    common = dict(DIMS, vocab_size=vocab, **ids)
    if kind == "llama":
        return LlamaForCausalLM, LlamaConfig(
            **common,
            rms_norm_eps=1e-5,
            tie_word_embeddings=True,
            rope_parameters={
                "rope_type": "llama3",
                "rope_theta": 500000.0,
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 32,
            },
        )
    if kind == "llama-dynamic":
        # Dynamic NTK over an original context of 32: the greedy continuation runs past it,
        # and reference.json's long_prompt is a full forward of 2 x 32 tokens.
        return LlamaForCausalLM, LlamaConfig(
            **{**common, "max_position_embeddings": DYNAMIC_ORIGINAL_MAX},
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "dynamic", "rope_theta": 10000.0, "factor": DYNAMIC_FACTOR},
        )
    if kind == "llama-bf16-sharded":
        return LlamaForCausalLM, LlamaConfig(
            **common,
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
        )
    if kind == "qwen2":
        return Qwen2ForCausalLM, Qwen2Config(
            **common,
            rms_norm_eps=1e-6,
            tie_word_embeddings=False,
            use_sliding_window=False,
            sliding_window=None,
            max_window_layers=DIMS["num_hidden_layers"],
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        )
    if kind == "qwen2-yarn":
        # YaRN over an original context of 32: the greedy continuation (and reference.json's
        # long_prompt) runs past it.
        return Qwen2ForCausalLM, Qwen2Config(
            **common,
            rms_norm_eps=1e-6,
            tie_word_embeddings=False,
            use_sliding_window=False,
            sliding_window=None,
            max_window_layers=DIMS["num_hidden_layers"],
            rope_parameters={
                "rope_type": "yarn",
                "rope_theta": 1000000.0,
                "factor": 4.0,
                "original_max_position_embeddings": YARN_ORIGINAL_MAX,
            },
        )
    if kind == "ministral":
        # Layer 0 slides (window 5 < prompt + generated), layer 1 is global.
        return MinistralForCausalLM, MinistralConfig(
            **common,
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
            sliding_window=5,
            layer_types=["sliding_attention", "full_attention"],
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        )
    if kind == "helium":
        # Interleaved RoPE; q/k/v and MLP biases (o has none).
        return HeliumForCausalLM, HeliumConfig(
            **common,
            rms_norm_eps=1e-8,
            tie_word_embeddings=False,
            attention_bias=True,
            mlp_bias=True,
            rope_parameters={"rope_type": "default", "rope_theta": 100000.0},
        )
    if kind == "starcoder2":
        # LayerNorm with bias, GELU MLP, biases everywhere, window 6 on every layer, tied.
        dims = {k: v for k, v in common.items() if k != "head_dim"}
        return Starcoder2ForCausalLM, Starcoder2Config(
            **dims,
            norm_epsilon=1e-5,
            hidden_act="gelu_pytorch_tanh",
            use_bias=True,
            sliding_window=6,
            tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
    if kind == "stablelm":
        # LayerNorm with bias, RoPE on a quarter of each head (4 of 16 channels), q/k/v biases.
        dims = {k: v for k, v in common.items() if k != "head_dim"}
        return StableLmForCausalLM, StableLmConfig(
            **dims,
            layer_norm_eps=1e-5,
            use_qkv_bias=True,
            qk_layernorm=False,
            use_parallel_residual=False,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
        )
    if kind == "stablelm-parallel":
        # StableLM 2 12B's layout: a LayerNorm per head on q and k (weight only), attention and
        # MLP in parallel off the one input LayerNorm.
        dims = {k: v for k, v in common.items() if k != "head_dim"}
        return StableLmForCausalLM, StableLmConfig(
            **dims,
            layer_norm_eps=1e-5,
            use_qkv_bias=False,
            qk_layernorm=True,
            use_parallel_residual=True,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
        )
    if kind == "bloom":
        # ALiBi, LayerNorm on the embeddings, fused head-interleaved query_key_value, tanh
        # GELU, biases everywhere, tied head; 4 heads, so 4 distinct slopes.
        return BloomForCausalLM, BloomConfig(
            vocab_size=vocab,
            hidden_size=DIMS["hidden_size"],
            n_layer=DIMS["num_hidden_layers"],
            n_head=DIMS["num_attention_heads"],
            layer_norm_epsilon=1e-5,
            tie_word_embeddings=True,
            **ids,
        )
    if kind == "mpt":
        # ALiBi with 6 heads (not a power of two: MPT's slope order differs from BLOOM's),
        # bias-free LayerNorms and projections, q/k/v clamped by attn_config.clip_qkv, tied
        # head. 48 wide so the fixture stays small.
        return MptForCausalLM, MptConfig(
            vocab_size=vocab,
            d_model=48,
            n_heads=6,
            n_layers=DIMS["num_hidden_layers"],
            max_seq_len=DIMS["max_position_embeddings"],
            layer_norm_epsilon=1e-5,
            attn_config={"clip_qkv": 1.0},
            tie_word_embeddings=True,
            **ids,
        )
    if kind == "falcon":
        # The new decoder architecture (Falcon-40B/180B): fused rows grouped by kv head (2 kv
        # heads for 4 query heads), parallel blocks with ln_attn and ln_mlp, RoPE, exact GELU,
        # no biases, tied head.
        return FalconForCausalLM, FalconConfig(
            vocab_size=vocab,
            hidden_size=DIMS["hidden_size"],
            num_hidden_layers=DIMS["num_hidden_layers"],
            num_attention_heads=DIMS["num_attention_heads"],
            num_kv_heads=DIMS["num_key_value_heads"],
            new_decoder_architecture=True,
            parallel_attn=True,
            bias=False,
            alibi=False,
            max_position_embeddings=DIMS["max_position_embeddings"],
            tie_word_embeddings=True,
            **ids,
        )
    if kind == "falcon-mq":
        # Falcon-7B's layout: multi-query (all query rows, then one key and one value head),
        # parallel blocks on one input_layernorm, RoPE; biases on (Falcon-7B has none) so the
        # multi-query bias split is checked too.
        return FalconForCausalLM, FalconConfig(
            vocab_size=vocab,
            hidden_size=DIMS["hidden_size"],
            num_hidden_layers=DIMS["num_hidden_layers"],
            num_attention_heads=DIMS["num_attention_heads"],
            new_decoder_architecture=False,
            multi_query=True,
            parallel_attn=True,
            bias=True,
            alibi=False,
            max_position_embeddings=DIMS["max_position_embeddings"],
            tie_word_embeddings=True,
            **ids,
        )
    if kind == "falcon-alibi":
        # Falcon-RW's layout: ALiBi, per-head fused rows (multi-head), sequential blocks with
        # input_layernorm and post_attention_layernorm, biases everywhere, tied head.
        return FalconForCausalLM, FalconConfig(
            vocab_size=vocab,
            hidden_size=DIMS["hidden_size"],
            num_hidden_layers=DIMS["num_hidden_layers"],
            num_attention_heads=DIMS["num_attention_heads"],
            new_decoder_architecture=False,
            multi_query=False,
            parallel_attn=False,
            bias=True,
            alibi=True,
            max_position_embeddings=DIMS["max_position_embeddings"],
            tie_word_embeddings=True,
            **ids,
        )
    if kind == "gpt_neox":
        # Pythia's layout: fused head-interleaved query_key_value, parallel residual with two
        # LayerNorms, RoPE on a quarter of each head, exact GELU, biases everywhere, untied.
        dims = {k: v for k, v in common.items() if k not in ("head_dim", "num_key_value_heads")}
        return GPTNeoXForCausalLM, GPTNeoXConfig(
            **dims,
            layer_norm_eps=1e-5,
            hidden_act="gelu",
            use_parallel_residual=True,
            attention_bias=True,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
        )
    if kind == "gpt_neox-sequential":
        # Sequential blocks (use_parallel_residual false: the MLP norms the attention's sum),
        # RoPE over the whole head, no attention biases.
        dims = {k: v for k, v in common.items() if k not in ("head_dim", "num_key_value_heads")}
        return GPTNeoXForCausalLM, GPTNeoXConfig(
            **dims,
            layer_norm_eps=1e-5,
            hidden_act="gelu",
            use_parallel_residual=False,
            attention_bias=False,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 1.0},
        )
    if kind == "mistral":
        return MistralForCausalLM, MistralConfig(
            **common,
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
            sliding_window=5,  # shorter than prompt + generation: the window matters
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        )
    if kind == "gemma":
        return GemmaForCausalLM, GemmaConfig(
            **common,
            rms_norm_eps=1e-6,
            hidden_act="gelu_pytorch_tanh",
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
    if kind == "gemma2":
        # Layer 0 slides (window 5 < prompt + generated), layer 1 is global; softcaps small
        # enough to bend scores and logits; query_pre_attn_scalar != head_dim.
        return Gemma2ForCausalLM, Gemma2Config(
            **common,
            rms_norm_eps=1e-6,
            hidden_activation="gelu_pytorch_tanh",
            query_pre_attn_scalar=24,
            sliding_window=5,
            attn_logit_softcapping=3.0,
            final_logit_softcapping=2.0,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
    if kind == "gemma3_text":
        # 3 layers: sliding, sliding, global (pattern 3); window 4; local RoPE theta 1e4,
        # global theta 1e6 with linear scaling; per-head q/k norms.
        return Gemma3ForCausalLM, Gemma3TextConfig(
            **dict(common, num_hidden_layers=3),
            rms_norm_eps=1e-6,
            hidden_activation="gelu_pytorch_tanh",
            query_pre_attn_scalar=16,
            sliding_window=4,
            layer_types=["sliding_attention", "sliding_attention", "full_attention"],
            rope_parameters={
                "full_attention": {"rope_type": "linear", "rope_theta": 1000000.0, "factor": 2.0},
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            },
        )
    if kind == "gemma4_text":
        # 4 layers: sliding, full, sliding, full (window 4); the last two reuse the keys and
        # values of the first two (num_kv_shared_layers 2) and have double-wide MLPs; full
        # layers with 32-wide heads, 1 key/value head whose keys are also its values, and
        # proportional RoPE on half of the frequency pairs; per-layer inputs 8 wide; final
        # logits soft-capped.
        return Gemma4ForCausalLM, Gemma4TextConfig(
            **dict(common, num_hidden_layers=4, intermediate_size=32),
            rms_norm_eps=1e-6,
            hidden_activation="gelu_pytorch_tanh",
            sliding_window=4,
            layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
            global_head_dim=32,
            num_global_key_value_heads=1,
            attention_k_eq_v=True,
            num_kv_shared_layers=2,
            use_double_wide_mlp=True,
            hidden_size_per_layer_input=8,
            vocab_size_per_layer_input=vocab,
            final_logit_softcapping=5.0,
            rope_parameters={
                "full_attention": {"rope_type": "proportional", "rope_theta": 1000000.0, "partial_rotary_factor": 0.5},
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            },
        )
    if kind == "gemma3n_text":
        # 4 layers: sliding, full, sliding, full (window 4); the last two reuse the keys and
        # values of the first two (num_kv_shared_layers 2); Gaussian top-k sparsity on the MLP
        # gates of layers 0 (0.95) and 2 (0.5); 4 AltUp streams, the active one the second;
        # LAuReL of rank 8; per-layer inputs 8 wide from a table of 200 rows (ids past it read
        # row 0); final logits soft-capped.
        return Gemma3nForCausalLM, Gemma3nTextConfig(
            **dict(common, num_hidden_layers=4, intermediate_size=64),
            rms_norm_eps=1e-6,
            hidden_activation="gelu_pytorch_tanh",
            sliding_window=4,
            layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
            num_kv_shared_layers=2,
            activation_sparsity_pattern=[0.95, 0.0, 0.5, 0.0],
            altup_num_inputs=4,
            altup_active_idx=1,
            laurel_rank=8,
            hidden_size_per_layer_input=8,
            vocab_size_per_layer_input=200,
            final_logit_softcapping=10.0,
        )
    if kind == "gemma4_unified_text":
        # Gemma 4 Unified's text decoder: no per-layer inputs; 4 layers sliding, full, sliding,
        # full (window 3), the last reusing the keys and values of the second; full layers with
        # 32-wide heads and values of their own (attention_k_eq_v off), proportional RoPE on a
        # quarter of the frequency pairs; no final soft-cap.
        return Gemma4UnifiedForCausalLM, Gemma4UnifiedTextConfig(
            **dict(common, num_hidden_layers=4, intermediate_size=64),
            rms_norm_eps=1e-6,
            hidden_activation="gelu_pytorch_tanh",
            sliding_window=3,
            layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
            global_head_dim=32,
            num_kv_shared_layers=1,
            rope_parameters={
                "full_attention": {"rope_type": "proportional", "rope_theta": 1000000.0, "partial_rotary_factor": 0.25},
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            },
        )
    if kind == "gemma3":
        # Gemma3ForConditionalGeneration: the gemma3_text fixture's text model (tied) with a
        # one-layer SigLIP tower; the image token id is outside the text vocabulary, so no
        # prompt or generated id stands for an image.
        _, text = make_config("gemma3_text", vocab, ids)
        return Gemma3ForConditionalGeneration, Gemma3Config(
            text_config=text,
            vision_config=SiglipVisionConfig(**TINY_VISION),
            mm_tokens_per_image=4,
            image_token_index=vocab,
            boi_token_index=vocab + 1,
            eoi_token_index=vocab + 2,
            **ids,
        )
    if kind in ("qwen3_5", "qwen3_5_moe"):
        # Qwen3_5(Moe)ForConditionalGeneration (the checkpoints Qwen publishes): the
        # qwen3_5_text (qwen3_5_moe_text) fixture's text model with a one-block vision tower
        # (saved as model.visual.*).
        _, text = make_config(f"{kind}_text", vocab, ids)
        cls, config = {"qwen3_5": (Qwen3_5ForConditionalGeneration, Qwen3_5Config),
                       "qwen3_5_moe": (Qwen3_5MoeForConditionalGeneration, Qwen3_5MoeConfig)}[kind]
        return cls, config(
            text_config=text.to_dict(),
            vision_config=dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=14,
                               out_hidden_size=text.hidden_size, num_position_embeddings=16),
            image_token_id=vocab,
            video_token_id=vocab + 1,
            vision_start_token_id=vocab + 2,
            vision_end_token_id=vocab + 3,
            tie_word_embeddings=False,
        )
    if kind == "mistral3":
        # Mistral3ForConditionalGeneration (Mistral-Small-3.x): the mistral fixture's text model,
        # its head untied (stored as language_model.lm_head), with a one-layer Pixtral tower.
        _, text = make_config("mistral", vocab, ids)
        return Mistral3ForConditionalGeneration, Mistral3Config(
            text_config=text,
            vision_config=PixtralVisionConfig(**TINY_VISION, head_dim=16),
            image_token_index=vocab,
            tie_word_embeddings=False,
        )
    if kind in ("gpt2", "gpt-sw3"):
        # gpt-sw3: GPT-2 under another model_type (written into config.json once saved).
        return GPT2LMHeadModel, GPT2Config(
            n_embd=DIMS["hidden_size"],
            n_layer=DIMS["num_hidden_layers"],
            n_head=DIMS["num_attention_heads"],
            n_positions=DIMS["max_position_embeddings"],
            n_inner=None,  # 4 * n_embd
            activation_function="gelu_new",
            layer_norm_epsilon=1e-5,
            vocab_size=vocab,
            tie_word_embeddings=True,
            **ids,
        )
    if kind == "gpt_bigcode":
        # SantaCoder's layout: GPT-2 with nn.Linear weights and multi-query attention (one
        # key/value head in the fused c_attn), tanh GELU, tied head.
        return GPTBigCodeForCausalLM, GPTBigCodeConfig(
            n_embd=DIMS["hidden_size"],
            n_layer=DIMS["num_hidden_layers"],
            n_head=DIMS["num_attention_heads"],
            n_positions=DIMS["max_position_embeddings"],
            n_inner=DIMS["intermediate_size"],
            activation_function="gelu_pytorch_tanh",
            layer_norm_epsilon=1e-5,
            multi_query=True,
            vocab_size=vocab,
            tie_word_embeddings=True,
            **ids,
        )
    if kind == "openai-gpt":
        # GPT-1: post-norm layers (ln(x + f(x))), no final norm, Conv1D weights, "gelu" (tanh).
        return OpenAIGPTLMHeadModel, OpenAIGPTConfig(
            n_embd=DIMS["hidden_size"],
            n_layer=DIMS["num_hidden_layers"],
            n_head=DIMS["num_attention_heads"],
            n_positions=DIMS["max_position_embeddings"],
            afn="gelu",
            layer_norm_epsilon=1e-5,
            vocab_size=vocab,
            tie_word_embeddings=True,
            **ids,
        )
    if kind in ("gptj", "codegen"):
        # Parallel attention and MLP off one LayerNorm, interleaved RoPE on half of each head
        # (rotary_dim 8 of 16), unbiased q/k/v/out, LM head with bias, untied; codegen: the
        # fused qkv_proj in 4 shards of q, v, k.
        cls, config = {"gptj": (GPTJForCausalLM, GPTJConfig), "codegen": (CodeGenForCausalLM, CodeGenConfig)}[kind]
        return cls, config(
            n_embd=DIMS["hidden_size"],
            n_layer=DIMS["num_hidden_layers"],
            n_head=DIMS["num_attention_heads"],
            n_positions=DIMS["max_position_embeddings"],
            n_inner=DIMS["intermediate_size"],
            rotary_dim=8,
            activation_function="gelu_new",
            layer_norm_epsilon=1e-5,
            vocab_size=vocab,
            tie_word_embeddings=False,
            **ids,
        )
    if kind == "gpt_neo":
        # Global then local attention (a window of 4, shorter than the prompt), unscaled
        # attention scores, unbiased q/k/v, learned positions, tied head.
        return GPTNeoForCausalLM, GPTNeoConfig(
            hidden_size=DIMS["hidden_size"],
            num_layers=DIMS["num_hidden_layers"],
            num_heads=DIMS["num_attention_heads"],
            intermediate_size=DIMS["intermediate_size"],
            max_position_embeddings=DIMS["max_position_embeddings"],
            attention_types=[[["global", "local"], 1]],
            window_size=4,
            activation_function="gelu_new",
            vocab_size=vocab,
            tie_word_embeddings=True,
            **ids,
        )
    if kind == "ctrl":
        # Sinusoidal positions, embeddings times sqrt(64), biased Wq/Wk/Wv/dense, ReLU MLP
        # (ffn.0, ffn.2), LayerNorms of 1e-6 in the layers and layer_norm_epsilon (1e-5 here)
        # in the final one, tied head with bias.
        return CTRLLMHeadModel, CTRLConfig(
            n_embd=DIMS["hidden_size"],
            n_layer=DIMS["num_hidden_layers"],
            n_head=DIMS["num_attention_heads"],
            dff=DIMS["intermediate_size"],
            n_positions=DIMS["max_position_embeddings"],
            layer_norm_epsilon=1e-5,
            vocab_size=vocab,
            tie_word_embeddings=True,
            **ids,
        )
    if kind == "gpt_neox_japanese":
        # GPT-NeoX's fused query_key_value without biases, sequential layers, RoPE on half of
        # each head, an unbiased MLP twice the hidden size, dense_bias on the last layer's
        # attention (perturbed off its zero init), tied head.
        return GPTNeoXJapaneseForCausalLM, GPTNeoXJapaneseConfig(
            hidden_size=DIMS["hidden_size"],
            num_hidden_layers=DIMS["num_hidden_layers"],
            num_attention_heads=DIMS["num_attention_heads"],
            intermediate_multiple_size=2,
            max_position_embeddings=DIMS["max_position_embeddings"],
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
            hidden_act="gelu",
            vocab_size=vocab,
            tie_word_embeddings=True,
            **ids,
        )
    if kind == "biogpt":
        # Learned positions two rows into their table, embeddings times sqrt(64), biased
        # attention, exact-GELU MLP (fc1/fc2), LayerNorms of 1e-5 whatever layer_norm_eps says
        # (1e-12 by default), tied output_projection.
        return BioGptForCausalLM, BioGptConfig(
            hidden_size=DIMS["hidden_size"],
            num_hidden_layers=DIMS["num_hidden_layers"],
            num_attention_heads=DIMS["num_attention_heads"],
            intermediate_size=DIMS["intermediate_size"],
            max_position_embeddings=DIMS["max_position_embeddings"],
            hidden_act="gelu",
            scale_embedding=True,
            vocab_size=vocab,
            tie_word_embeddings=True,
            **ids,
        )
    if kind == "xglm":
        # Sinusoidal positions two rows into their table, embeddings times sqrt(64), biased
        # attention, exact-GELU MLP (fc1/fc2), tied head.
        return XGLMForCausalLM, XGLMConfig(
            d_model=DIMS["hidden_size"],
            num_layers=DIMS["num_hidden_layers"],
            attention_heads=DIMS["num_attention_heads"],
            ffn_dim=DIMS["intermediate_size"],
            max_position_embeddings=DIMS["max_position_embeddings"],
            activation_function="gelu",
            scale_embedding=True,
            vocab_size=vocab,
            tie_word_embeddings=True,
            **ids,
        )
    if kind in ("opt", "opt-350m"):
        # Learned positions two rows into their table, ReLU MLP (fc1/fc2), biases everywhere,
        # tied head; opt-350m: post-norm layers without a final norm, embeddings 32 wide
        # projected in and out of the hidden 64 (project_in, project_out).
        post = kind == "opt-350m"
        return OPTForCausalLM, OPTConfig(
            hidden_size=DIMS["hidden_size"],
            num_hidden_layers=DIMS["num_hidden_layers"],
            num_attention_heads=DIMS["num_attention_heads"],
            ffn_dim=DIMS["intermediate_size"],
            max_position_embeddings=DIMS["max_position_embeddings"],
            do_layer_norm_before=not post,
            word_embed_proj_dim=32 if post else None,
            activation_function="relu",
            vocab_size=vocab,
            tie_word_embeddings=True,
            **ids,
        )
    if kind == "phi":
        return PhiForCausalLM, PhiConfig(
            hidden_size=DIMS["hidden_size"],
            intermediate_size=DIMS["intermediate_size"],
            num_hidden_layers=DIMS["num_hidden_layers"],
            num_attention_heads=DIMS["num_attention_heads"],
            num_key_value_heads=DIMS["num_attention_heads"],
            max_position_embeddings=DIMS["max_position_embeddings"],
            hidden_act="gelu_new",
            layer_norm_eps=1e-5,
            partial_rotary_factor=0.5,
            qk_layernorm=False,
            tie_word_embeddings=False,
            vocab_size=vocab,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
            **ids,
        )
    if kind == "lfm2":
        # Hybrid: short-convolution layers (kernel 3, biases on: conv_bias) and GQA layers with
        # per-head q/k norms; the MLP width is derived (2/3 of 192 = 128, times 1.25 = 160,
        # rounded up to a multiple of 48: 192).
        return Lfm2ForCausalLM, Lfm2Config(
            **{**common, "num_hidden_layers": 4, "intermediate_size": 192},
            norm_eps=1e-5,
            tie_word_embeddings=True,
            conv_bias=True,
            conv_L_cache=3,
            block_auto_adjust_ff_dim=True,
            block_ffn_dim_multiplier=1.25,
            block_multiple_of=48,
            layer_types=["conv", "full_attention", "conv", "full_attention"],
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        )
    if kind == "lfm2_moe":
        # LFM2's hybrid layers (conv, attention, conv; kernel 3, conv biases), a dense SwiGLU MLP
        # (intermediate_size as is) in the first num_dense_layers, then 4 experts 32 wide:
        # top-2 of the sigmoid scores plus the expert bias (perturbed), weighted by the scores
        # renormalised, times routed_scaling_factor 1.5.
        return Lfm2MoeForCausalLM, Lfm2MoeConfig(
            **{**common, "num_hidden_layers": 3},
            moe_intermediate_size=32,
            num_dense_layers=1,
            num_experts=4,
            num_experts_per_tok=2,
            use_expert_bias=True,
            norm_topk_prob=True,
            routed_scaling_factor=1.5,
            norm_eps=1e-5,
            tie_word_embeddings=True,
            conv_bias=True,
            conv_L_cache=3,
            layer_types=["conv", "full_attention", "conv"],
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        )
    if kind == "qwen3_next":
        # Hybrid: Gated DeltaNet layers 0 and 2 (2 key heads of 16 channels, 4 value heads of
        # 16: each key head serves two value heads; conv kernel 4) around an output-gated GQA
        # layer 1 with partial RoPE (a quarter of each head, Qwen3-Next's default); MoE in
        # layers 0 and 1 (4 experts of width 32, top 2 renormalised, plus the sigmoid-gated
        # shared expert of width 32), a dense SwiGLU MLP in layer 2 (mlp_only_layers).
        return Qwen3NextForCausalLM, Qwen3NextConfig(
            **{**common, "num_hidden_layers": 3},
            layer_types=["linear_attention", "full_attention", "linear_attention"],
            linear_num_key_heads=2,
            linear_num_value_heads=4,
            linear_key_head_dim=16,
            linear_value_head_dim=16,
            linear_conv_kernel_dim=4,
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            shared_expert_intermediate_size=32,
            decoder_sparse_step=1,
            mlp_only_layers=[2],
            norm_topk_prob=True,
            rms_norm_eps=1e-6,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
        )
    if kind in ("qwen3_5_text", "qwen3_5_moe_text"):
        # Qwen3.5's text decoders: Qwen3-Next's layers (Gated DeltaNet 0 with 2 key heads
        # serving 4 value heads of 16, conv kernel 4; output-gated GQA layer 1, a quarter of
        # each head rotated) with the linear attention's projections unfused; a dense SwiGLU MLP
        # in every layer (qwen3_5_text) or 4 experts of width 32, top 2, plus the gated shared
        # expert of width 32 in every layer (qwen3_5_moe_text).
        linear = dict(
            layer_types=["linear_attention", "full_attention"],
            linear_num_key_heads=2,
            linear_num_value_heads=4,
            linear_key_head_dim=16,
            linear_value_head_dim=16,
            linear_conv_kernel_dim=4,
            rms_norm_eps=1e-6,
            tie_word_embeddings=False,
            # Half of each head rotated: 4 frequency pairs, so that the multimodal RoPE's
            # interleaving reaches the temporal, height and width rows (qwen3_5_text: the
            # default mrope_section [11, 11, 10]; qwen3_5_moe_text: [3, 1, 0], no width pair).
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5,
                             **({} if kind == "qwen3_5_text" else {"mrope_section": [3, 1, 0]})},
        )
        if kind == "qwen3_5_text":
            return Qwen3_5ForCausalLM, Qwen3_5TextConfig(**common, **linear)
        return Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig(
            **{k: v for k, v in common.items() if k != "intermediate_size"},
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            shared_expert_intermediate_size=32,
            **linear,
        )
    if kind == "bamba":
        # Hybrid: Mamba2 layers 0 and 2 (8 SSM heads of 16 channels in 2 groups, state 16,
        # conv kernel 4, every bias on; chunk 8 so that transformers' prefill crosses a chunk
        # boundary) around a GQA layer 1 with partial RoPE (half of each head, Bamba's
        # default); a SwiGLU MLP with biases in every layer.
        return BambaForCausalLM, BambaConfig(
            **{**common, "num_hidden_layers": 3},
            attn_layer_indices=[1],
            mamba_n_heads=8,
            mamba_d_head=16,
            mamba_n_groups=2,
            mamba_d_state=16,
            mamba_d_conv=4,
            mamba_expand=2,
            mamba_chunk_size=8,
            mamba_conv_bias=True,
            mamba_proj_bias=True,
            attention_bias=True,
            mlp_bias=True,
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
        )
    if kind == "granitemoehybrid":
        # Granite-4 hybrid ("-h"): Mamba2 layers 0 and 2 (as Bamba's, projections without
        # biases) around a GQA layer 1 without positions (position_embedding_type "nope", as
        # the hybrid checkpoints say); every layer's MLP is 4 routed SwiGLU experts of width
        # 32 (top 2; a width of one quantization block, so that int4 blocks stay within an
        # expert) plus the shared expert of width 32; Granite's multipliers.
        return GraniteMoeHybridForCausalLM, GraniteMoeHybridConfig(
            **{**common, "num_hidden_layers": 3, "intermediate_size": 32},
            layer_types=["mamba", "attention", "mamba"],
            mamba_n_heads=8,
            mamba_d_head=16,
            mamba_n_groups=2,
            mamba_d_state=16,
            mamba_d_conv=4,
            mamba_expand=2,
            mamba_chunk_size=8,
            mamba_conv_bias=True,
            mamba_proj_bias=False,
            num_local_experts=4,
            num_experts_per_tok=2,
            shared_intermediate_size=32,
            position_embedding_type="nope",
            embedding_multiplier=1.5,
            residual_multiplier=0.7,
            attention_multiplier=0.2,
            logits_scaling=1.3,
            rms_norm_eps=1e-6,
            tie_word_embeddings=False,
        )
    if kind == "granitemoehybrid-attn":
        # Granite-4 dense (as granite-4.0-micro): attention layers only, with RoPE, no routed
        # experts (num_local_experts 0: the shared MLP alone), Granite's multipliers; the
        # configuration onnxruntime-genai's granitemoehybrid type runs.
        return GraniteMoeHybridForCausalLM, GraniteMoeHybridConfig(
            **common,
            layer_types=["attention", "attention"],
            num_local_experts=0,
            shared_intermediate_size=96,
            position_embedding_type="rope",
            embedding_multiplier=2.0,
            residual_multiplier=0.6,
            attention_multiplier=0.15,
            logits_scaling=1.7,
            rms_norm_eps=1e-6,
            tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
    if kind in ("mamba", "falcon_mamba"):
        # Mamba-1 selective state-space layers only: 128 channels, state 16, conv kernel 4,
        # biases on; mamba's time-step rank "auto" (⌈64 / 16⌉ = 4), falcon_mamba's 8 with its
        # B/C/dt RMS norms (mixer_rms_eps 1e-5).
        cls, cfg_cls, extra = {
            "mamba": (MambaForCausalLM, MambaConfig, {"time_step_rank": "auto"}),
            "falcon_mamba": (FalconMambaForCausalLM, FalconMambaConfig, {"time_step_rank": 8, "mixer_rms_eps": 1e-5}),
        }[kind]
        return cls, cfg_cls(
            hidden_size=64,
            num_hidden_layers=2,
            state_size=16,
            expand=2,
            conv_kernel=4,
            use_bias=True,
            use_conv_bias=True,
            layer_norm_epsilon=1e-5,
            residual_in_fp32=True,
            tie_word_embeddings=True,
            vocab_size=vocab,
            **extra,
            **ids,
        )
    if kind == "falcon_h1":
        # Falcon-H1: GQA (RoPE) and a Mamba2 mixer side by side in both layers (8 SSM heads of
        # 16 channels, width mamba_d_ssm 128, in 2 groups, state 16, conv kernel 4, every bias
        # on; chunk 8 so that the prefill crosses a chunk boundary; the gated RMS norm on,
        # before the gate as by default); every µP multiplier off 1.
        return FalconH1ForCausalLM, FalconH1Config(
            **common,
            mamba_d_ssm=128,
            mamba_n_heads=8,
            mamba_d_head="auto",
            mamba_n_groups=2,
            mamba_d_state=16,
            mamba_d_conv=4,
            mamba_expand=2,
            mamba_chunk_size=8,
            mamba_conv_bias=True,
            mamba_proj_bias=True,
            mamba_rms_norm=True,
            mamba_norm_before_gate=True,
            projectors_bias=True,
            attention_bias=True,
            mlp_bias=True,
            embedding_multiplier=1.5,
            lm_head_multiplier=0.8,
            mlp_multipliers=[1.2, 0.7],
            key_multiplier=0.6,
            attention_in_multiplier=1.3,
            attention_out_multiplier=0.9,
            ssm_multipliers=[0.8, 1.1, 0.9, 1.2, 0.7],
            ssm_in_multiplier=1.4,
            ssm_out_multiplier=0.75,
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
    if kind == "zamba2":
        # Zamba2: Mamba2 layer 0 (8 SSM heads of 16 channels in 2 groups, state 16, conv
        # kernel 4, chunk 8, projection biases on) and hybrid layer 1: the shared transformer
        # block (4 heads of 32 over the concatenated 128-wide input, RoPE; a GELU MLP from a
        # fused gate_up_proj with biases; LoRA adapters of rank 8 on q, k, v and gate_up, which
        # need as many key/value heads as query heads) and the layer's linear before its own
        # Mamba2 mixer. (With a second hybrid layer, transformers' cached decode steps drift
        # 1.4e-5 to 1.4e-4 from its own full forward on these random weights.)
        return Zamba2ForCausalLM, Zamba2Config(
            **{k: v for k, v in common.items() if k not in ("head_dim", "num_hidden_layers", "num_key_value_heads")},
            num_hidden_layers=2,
            num_key_value_heads=4,
            layers_block_type=["mamba", "hybrid"],
            n_mamba_heads=8,
            mamba_ngroups=2,
            mamba_d_state=16,
            mamba_d_conv=4,
            mamba_expand=2,
            chunk_size=8,
            add_bias_linear=True,
            num_mem_blocks=1,
            use_shared_attention_adapter=True,
            adapter_rank=8,
            use_mem_rope=True,
            hidden_act="gelu",
            rms_norm_eps=1e-5,
            tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
    if kind == "jamba":
        # Jamba: Mamba-1 layers 0 and 2 (64 channels, state 8, conv kernel 4, time-step rank
        # 8, its dt/B/C RMSNorms with weights, every bias on) around an attention layer 1
        # (attn_layer_period 2, offset 1; GQA without positions); layers 0 and 2 have 4 SwiGLU
        # experts 32 wide (top 2 of the softmax, not renormalised; expert_layer_period 2,
        # offset 0), layer 1 a SwiGLU MLP 32 wide. The seed leaves every token's second and
        # third routing probabilities at least 5e-3 apart (prompt and decode steps): a nearer
        # tie flips the pick under f16 rounding, a jump no tolerance covers.
        return JambaForCausalLM, JambaConfig(
            **{**common, "num_hidden_layers": 3, "intermediate_size": 32},
            attn_layer_period=2,
            attn_layer_offset=1,
            expert_layer_period=2,
            expert_layer_offset=0,
            num_experts=4,
            num_experts_per_tok=2,
            mamba_d_state=8,
            mamba_d_conv=4,
            mamba_expand=1,
            mamba_dt_rank=8,
            mamba_conv_bias=True,
            mamba_proj_bias=True,
            rms_norm_eps=1e-6,
            tie_word_embeddings=False,
        )
    if kind == "nemotron_h":
        # Nemotron-H: one mixer per block (pre-norm, residual), layers Mamba2 (8 SSM heads of
        # 16 channels in 2 groups, state 16, conv kernel 4, every bias on; chunk 8 so that the
        # prefill crosses a chunk boundary), GQA attention without positions, MoE (4 squared-
        # ReLU experts 32 wide, top 2 of the sigmoid scores plus the perturbed correction bias,
        # renormalised, times 1.5, plus a shared expert 32 wide), a squared-ReLU MLP with biases.
        return NemotronHForCausalLM, NemotronHConfig(
            **{k: v for k, v in common.items() if k != "num_hidden_layers"},
            layers_block_type=["linear_attention", "full_attention", "moe", "mlp"],
            mamba_num_heads=8,
            mamba_head_dim=16,
            n_groups=2,
            ssm_state_size=16,
            conv_kernel=4,
            expand=2,
            chunk_size=8,
            use_conv_bias=True,
            use_bias=True,
            mlp_bias=True,
            n_routed_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            moe_shared_expert_intermediate_size=32,
            n_group=1,
            topk_group=1,
            norm_topk_prob=True,
            routed_scaling_factor=1.5,
            layer_norm_epsilon=1e-5,
            tie_word_embeddings=False,
        )
    if kind == "recurrent_gemma":
        # Griffin: block_types (recurrent, recurrent, attention) cycled over 4 layers (r, r, a,
        # r); RG-LRU width 96 (4 blocks of 24, wider than hidden), conv width 4; local MQA
        # (4 query heads of 16, 1 key/value head, half of each head rotated, q/k/v biases) with
        # a window of 4 tokens, shorter than the prompt; the logits soft-capped at 5 so the cap
        # acts.
        return transformers.RecurrentGemmaForCausalLM, transformers.RecurrentGemmaConfig(
            num_hidden_layers=4,
            vocab_size=vocab,
            hidden_size=64,
            intermediate_size=128,
            num_attention_heads=4,
            num_key_value_heads=1,
            lru_width=96,
            attention_window_size=4,
            conv1d_width=4,
            logits_soft_cap=5.0,
            rms_norm_eps=1e-6,
            attention_bias=True,
            block_types=["recurrent", "recurrent", "attention"],
            tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
            **ids,
        )
    if kind == "mamba2":
        # Selective state-space layers only (no attention, no MLP): 8 SSM heads of 16 channels
        # in 2 groups (B and C shared by 4 heads each), state 16, conv kernel 4, biases on;
        # chunk_size 8 so that transformers' chunked prefill crosses a chunk boundary.
        return Mamba2ForCausalLM, Mamba2Config(
            hidden_size=64,
            num_hidden_layers=3,
            num_heads=8,
            head_dim=16,
            expand=2,
            state_size=16,
            n_groups=2,
            conv_kernel=4,
            chunk_size=8,
            use_bias=True,
            use_conv_bias=True,
            layer_norm_epsilon=1e-5,
            residual_in_fp32=True,
            tie_word_embeddings=False,
            vocab_size=vocab,
            **ids,
        )
    if kind == "qwen3":
        return Qwen3ForCausalLM, Qwen3Config(
            **common,
            rms_norm_eps=1e-6,
            tie_word_embeddings=True,
            use_sliding_window=False,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        )
    if kind == "smollm3":
        # Layer 1 is a NoPE layer.
        return SmolLM3ForCausalLM, SmolLM3Config(
            **common,
            rms_norm_eps=1e-6,
            tie_word_embeddings=True,
            no_rope_layers=[1, 0],
            rope_parameters={"rope_type": "default", "rope_theta": 5000000.0},
        )
    if kind == "granite":
        return GraniteForCausalLM, GraniteConfig(
            **common,
            rms_norm_eps=1e-5,
            tie_word_embeddings=True,
            embedding_multiplier=3.0,
            residual_multiplier=0.5,
            attention_multiplier=0.125,
            logits_scaling=2.0,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
    if kind == "arcee":
        # Squared-ReLU MLP without a gate; biases on q/k/v/o and the MLP.
        return ArceeForCausalLM, ArceeConfig(
            **common,
            rms_norm_eps=1e-5,
            hidden_act="relu2",
            attention_bias=True,
            mlp_bias=True,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
    if kind == "emu3":
        # Emu3's text decoder: Llama; attention_bias and mlp_bias (class attributes, off by
        # default, honoured when config.json sets them) both on.
        return Emu3ForCausalLM, Emu3TextConfig(
            **common,
            rms_norm_eps=1e-5,
            attention_bias=True,
            mlp_bias=True,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        )
    if kind == "mllama":
        # MllamaForCausalLM on text only: layers 1 and 3 of 4 are cross-attention layers that
        # the text-only path skips (their weights are saved, never read).
        return MllamaForCausalLM, MllamaTextConfig(
            **{k: v for k, v in common.items() if k not in ("head_dim", "num_hidden_layers")},
            num_hidden_layers=4,
            cross_attention_layers=[1, 3],
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
        )
    if kind == "seed_oss":
        # Biases on q/k/v (attention_bias) but none on o (attention_out_bias), MLP biases.
        return SeedOssForCausalLM, SeedOssConfig(
            **common,
            rms_norm_eps=1e-6,
            attention_bias=True,
            attention_out_bias=False,
            mlp_bias=True,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        )
    if kind == "internlm3":
        # Built by transformers as Llama; qkv_bias/bias (its names for attention_bias/mlp_bias)
        # both on.
        return LlamaForCausalLM, InternLM3Config(
            **common,
            rms_norm_eps=1e-5,
            attention_bias=True,
            mlp_bias=True,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 50000000.0},
        )
    if kind == "exaone":
        # Built by transformers as Llama; RoPE theta left to ExaoneConfig's default (5e5).
        return LlamaForCausalLM, ExaoneConfig(
            **common,
            rms_norm_eps=1e-5,
            tie_word_embeddings=True,
        )
    if kind == "hunyuan_v1_dense":
        # Per-head q/k RMSNorm after RoPE (query_layernorm, key_layernorm); q/k/v/o biases; RoPE
        # with a fixed NTK alpha (the base stretched by alpha^(d/(d-2))).
        return HunYuanDenseV1ForCausalLM, HunYuanDenseV1Config(
            **common,
            rms_norm_eps=1e-5,
            attention_bias=True,
            tie_word_embeddings=True,
            rope_parameters={"rope_type": "dynamic", "rope_theta": 10000.0, "alpha": 50.0, "factor": 1.0},
        )
    if kind == "cwm":
        # CwmConfig's layer pattern on 2 layers: layer 0 global, layer 1 slides (window 5 <
        # prompt + generated); no attention biases whatever attention_bias says; Llama 3 RoPE.
        return CwmForCausalLM, CwmConfig(
            **common,
            rms_norm_eps=1e-5,
            sliding_window=5,
            mlp_bias=True,
            tie_word_embeddings=False,
            rope_parameters={
                "rope_type": "llama3",
                "rope_theta": 1000000.0,
                "factor": 4.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 32,
            },
        )
    if kind == "vaultgemma":
        # Gemma 2's fixture without the block-output norms: layer 0 slides (window 5 < prompt +
        # generated), layer 1 is global; softcaps small enough to bend scores and logits.
        return VaultGemmaForCausalLM, VaultGemmaConfig(
            **common,
            rms_norm_eps=1e-6,
            hidden_activation="gelu_pytorch_tanh",
            query_pre_attn_scalar=24,
            sliding_window=5,
            attn_logit_softcapping=3.0,
            final_logit_softcapping=2.0,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
    if kind == "ministral3":
        # Queries scaled by 1 + beta * log(1 + floor(pos / 8)): the temperature steps every 8
        # positions over the prompt and generation; YaRN over the same original context.
        return Ministral3ForCausalLM, Ministral3Config(
            **common,
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
            rope_parameters={
                "rope_type": "yarn",
                "rope_theta": 1000000.0,
                "factor": 4.0,
                "original_max_position_embeddings": 8,
                "beta_fast": 32.0,
                "beta_slow": 1.0,
                "mscale": 1.0,
                "mscale_all_dim": 1.0,
                "llama_4_scaling_beta": 0.5,
            },
        )
    if kind == "granite_swa":
        # 3 layers in GraniteSWAConfig's pattern (full, sliding, sliding; window 5); a RoPE base
        # per layer, the middle one none (NoPE); per-head sinks; Granite's multipliers;
        # q/k/v/o biases; MLPs of width 64 (3 layers, yet a small fixture).
        return GraniteSWAForCausalLM, GraniteSWAConfig(
            **dict(common, num_hidden_layers=3, intermediate_size=64),
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
            attention_bias=True,
            sliding_window=5,
            layer_rope_theta=[10000.0, 0, 500000.0],
            embedding_multiplier=3.0,
            residual_multiplier=0.5,
            attention_multiplier=0.125,
            logits_scaling=2.0,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
    if kind == "granitemoeshared":
        # The granitemoe fixture plus a shared SwiGLU expert of width 16.
        return GraniteMoeSharedForCausalLM, GraniteMoeSharedConfig(
            **dict(common, intermediate_size=32),
            rms_norm_eps=1e-6,
            tie_word_embeddings=True,
            num_local_experts=4,
            num_experts_per_tok=2,
            shared_intermediate_size=16,
            embedding_multiplier=3.0,
            residual_multiplier=0.5,
            attention_multiplier=0.125,
            logits_scaling=2.0,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
    if kind == "granitemoe_swa":
        # Layer 0 full without RoPE (layer_rope_theta 0), layer 1 sliding (window 5) with it;
        # sinks; 4 experts of width 32, top-2, and a shared expert of width 16.
        return GraniteMoeSWAForCausalLM, GraniteMoeSWAConfig(
            **dict(common, intermediate_size=32),
            rms_norm_eps=1e-6,
            tie_word_embeddings=False,
            num_local_experts=4,
            num_experts_per_tok=2,
            shared_intermediate_size=16,
            sliding_window=5,
            layer_rope_theta=[0, 10000.0],
            embedding_multiplier=3.0,
            residual_multiplier=0.5,
            attention_multiplier=0.125,
            logits_scaling=2.0,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
    if kind == "flex_olmo":
        # OLMoE's 4 experts of width 32, top-2 without renormalisation, in post-norm layers.
        return FlexOlmoForCausalLM, FlexOlmoConfig(
            **dict(common, intermediate_size=32),
            rms_norm_eps=1e-6,
            tie_word_embeddings=False,
            num_experts=4,
            num_experts_per_tok=2,
            norm_topk_prob=False,
            rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
        )
    if kind == "jais2":
        # LayerNorm with bias, ungated squared-ReLU MLP, biases on q/k/v/o and the MLP.
        return Jais2ForCausalLM, Jais2Config(
            **common,
            layer_norm_eps=1e-5,
            attention_bias=True,
            mlp_bias=True,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
    if kind == "nanochat":
        # Weightless RMSNorms (one before the layers), RoPE of the opposite sign, q/k norms after
        # RoPE, squared-ReLU fc1/fc2 MLP, logits capped at 3.
        dims = {k: v for k, v in common.items() if k != "head_dim"}
        return NanoChatForCausalLM, NanoChatConfig(
            **dims,
            rms_norm_eps=1e-6,
            final_logit_softcapping=3.0,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
    if kind == "bitnet":
        # Sub-norms before o_proj and down_proj, gated squared-ReLU MLP; q/k/v/o biases.
        return BitNetForCausalLM, BitNetConfig(
            **common,
            rms_norm_eps=1e-5,
            attention_bias=True,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
        )
    if kind == "iquestcoder":
        # Built by transformers as Llama; q/k/v/o and MLP biases.
        return LlamaForCausalLM, IQuestCoderConfig(
            **common,
            rms_norm_eps=1e-5,
            attention_bias=True,
            mlp_bias=True,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
    if kind == "hyperclovax":
        # Granite's multipliers with the logits multiplied, norms on the block outputs.
        return HyperCLOVAXForCausalLM, HyperCLOVAXConfig(
            **common,
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
            use_post_norm=True,
            embedding_multiplier=3.0,
            residual_multiplier=0.5,
            attention_multiplier=0.2,
            logits_scaling=0.5,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
    if kind == "mellum":
        # Layer 0 slides (window 5) with its own RoPE and a dense MLP, layer 1 is full with 4
        # experts of width 32, top-2 renormalised; per-head q/k norms.
        return MellumForCausalLM, MellumConfig(
            **common,
            rms_norm_eps=1e-6,
            tie_word_embeddings=False,
            sliding_window=5,
            layer_types=["sliding_attention", "full_attention"],
            mlp_layer_types=["dense", "sparse"],
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            norm_topk_prob=True,
            rope_parameters={
                "full_attention": {"rope_type": "default", "rope_theta": 500000.0},
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            },
        )
    if kind == "diffllama":
        # Differential attention (4 query heads in 2 pairs, 2 kv heads split in halves); the λ
        # vectors are parameters, perturbed with the other weights.
        return DiffLlamaForCausalLM, DiffLlamaConfig(
            **common,
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
    if kind == "doge":
        # Dynamic mask attention; keep_window_size 48 is below max_position_embeddings (so the
        # build has its top-k) but above prompt + generation: where the top-k binds, repeated
        # tokens tie in layer 0 (its values are functions of the token) and which tied key
        # transformers keeps is arbitrary (its cached and uncached forwards disagree). The A
        # vector is perturbed off its zero init with the other weights, the residual scales
        # near 1 (perturb).
        return DogeForCausalLM, DogeConfig(
            **common,
            keep_window_size=48,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
    if kind == "jetmoe":
        # Mixture of attention heads and of MLP experts: 4 experts, 2 per token (so 2 kv heads
        # give 4 query heads), expert width 32, head dim 16 (kv_channels); the experts' output
        # biases are perturbed with the other biases; tied head.
        dims = {k: v for k, v in common.items() if k not in ("intermediate_size", "head_dim", "num_attention_heads")}
        return JetMoeForCausalLM, JetMoeConfig(
            **dims,
            intermediate_size=32,
            kv_channels=16,
            num_local_experts=4,
            num_experts_per_tok=2,
            rms_norm_eps=1e-5,
            tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
    if kind == "modernbert-decoder":
        # A global layer then a local one (window local_attention / 2 = 4, crossed by the
        # prompt), each with its own RoPE theta; LayerNorm, attention and LM-head biases on
        # (perturbed), decoder bias, tied head.
        dims = {k: v for k, v in common.items() if k not in ("num_key_value_heads", "head_dim")}
        return ModernBertDecoderForCausalLM, ModernBertDecoderConfig(
            **dims,
            local_attention=8,
            norm_bias=True,
            attention_bias=True,
            classifier_bias=True,
            tie_word_embeddings=True,
            rope_parameters={
                "full_attention": {"rope_type": "default", "rope_theta": 160000.0},
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            },
        )
    if kind == "solar_open":
        # 4 experts of width 32 in 2 groups of 2, the best group competing, top-2 renormalised and
        # scaled by 2.5; a shared expert of width 32; q/k/v biases (o has none).
        dims = {k: v for k, v in common.items() if k != "intermediate_size"}
        return SolarOpenForCausalLM, SolarOpenConfig(
            **dims,
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
            attention_bias=True,
            moe_intermediate_size=32,
            n_routed_experts=4,
            num_experts_per_tok=2,
            n_group=2,
            topk_group=1,
            n_shared_experts=1,
            norm_topk_prob=True,
            routed_scaling_factor=2.5,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        )
    if kind == "nemotron":
        # LayerNorm1P (scale 1 + w), RoPE on half of each head, relu2 MLP without a gate.
        return NemotronForCausalLM, NemotronConfig(
            **common,
            norm_eps=1e-5,
            hidden_act="relu2",
            attention_bias=False,
            mlp_bias=False,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
        )
    if kind == "persimmon":
        # Fused head-interleaved query_key_value, per-head q/k LayerNorm with bias, RoPE (theta
        # 25000, persimmon-8b's) on half of each head, relu2 MLP, biases everywhere, untied;
        # saved in the v4 spelling (rope_theta, partial_rotary_factor at the top level).
        return PersimmonForCausalLM, PersimmonConfig(
            **{k: v for k, v in common.items() if k not in ("head_dim", "num_key_value_heads")},
            layer_norm_eps=1e-5,
            hidden_act="relu2",
            qk_layernorm=True,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 25000.0, "partial_rotary_factor": 0.5},
        )
    if kind == "cohere":
        # Parallel blocks off one LayerNorm without bias, interleaved RoPE over whole heads,
        # logits times logit_scale (0.5: not 1, yet the logits keep a usable top-2 gap), tied.
        return CohereForCausalLM, CohereConfig(
            **{k: v for k, v in common.items() if k != "head_dim"},
            layer_norm_eps=1e-5,
            logit_scale=0.5,
            attention_bias=False,
            use_qk_norm=False,
            tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
    if kind == "cohere2":
        # Cohere's parallel blocks and logit scale; layer 0 slides (window 5 < prompt +
        # generated) with interleaved RoPE, layer 1 is global without position embedding
        # (sliding_window_pattern 2, written out as layer_types), tied.
        return Cohere2ForCausalLM, Cohere2Config(
            **{k: v for k, v in common.items() if k != "head_dim"},
            layer_norm_eps=1e-5,
            logit_scale=0.5,
            attention_bias=False,
            sliding_window=5,
            sliding_window_pattern=2,
            tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": 50000.0},
        )
    if kind == "cohere_compass_text":
        # Cohere's parallel blocks off one bias-free LayerNorm and its logit scale, q/k/v/o
        # biases; layer 0 slides (window 5 < prompt + generated) with RoPE theta 1e4, layer 1
        # is global with theta 5e4 (rotate-half pairs; M-RoPE sections that text positions
        # make plain RoPE), tied.
        return CohereCompassForCausalLM, CohereCompassTextConfig(
            **{k: v for k, v in common.items() if k != "head_dim"},
            layer_norm_eps=1e-5,
            logit_scale=0.5,
            attention_bias=True,
            sliding_window=5,
            layer_types=["sliding_attention", "full_attention"],
            tie_word_embeddings=True,
            rope_parameters={
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [4, 2, 2]},
                "full_attention": {"rope_type": "default", "rope_theta": 50000.0, "mrope_section": [4, 2, 2]},
            },
        )
    if kind == "cohere2_moe":
        # Cohere 2's parallel blocks and logit scale, 3 layers: layer 0 is a dense prefix layer
        # (first_k_dense_replace 1, width 96) that is global yet rotates
        # (prefix_dense_sliding_window_pattern 1); layer 1 slides (window 5) and rotates,
        # layer 2 is global without position embedding (sliding_window_pattern 2); both have 4
        # experts of width 32, top-2 softmax, and one shared expert averaged with them; tied.
        return Cohere2MoeForCausalLM, Cohere2MoeConfig(
            **{**common, "intermediate_size": 32, "num_hidden_layers": 3},
            layer_norm_eps=1e-5,
            logit_scale=0.5,
            attention_bias=False,
            sliding_window=5,
            sliding_window_pattern=2,
            first_k_dense_replace=1,
            prefix_dense_sliding_window_pattern=1,
            prefix_dense_intermediate_size=96,
            num_experts=4,
            num_experts_per_tok=2,
            num_shared_experts=1,
            shared_expert_combination_strategy="average",
            expert_selection_fn="softmax",
            tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": 50000.0},
        )
    if kind == "ernie4_5":
        # Interleaved RoPE over whole heads (theta 5e5), use_bias on q/k/v/o and the MLP, tied.
        return Ernie4_5ForCausalLM, Ernie4_5Config(
            **common,
            rms_norm_eps=1e-5,
            use_bias=True,
            tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
        )
    if kind == "ernie4_5_moe":
        # ERNIE 4.5's decoder (interleaved RoPE, use_bias) with a dense layer 0 and a MoE layer
        # 1 (moe_layer_start_index 1): 4 SwiGLU experts, top-2 picked on the softmax scores plus
        # the (perturbed) score-correction bias, renormalised, and a shared expert with biases.
        return Ernie4_5_MoeForCausalLM, Ernie4_5_MoeConfig(
            **common,
            rms_norm_eps=1e-5,
            use_bias=True,
            tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
            moe_num_experts=4,
            moe_k=2,
            moe_intermediate_size=32,
            moe_num_shared_experts=1,
            moe_layer_start_index=1,
            moe_layer_end_index=-1,
            moe_layer_interval=1,
        )
    if kind == "minimax_m2":
        # Full-width q/k RMSNorm, RoPE on half of each head (rotary_dim 8 of head_dim 16, as the
        # released checkpoints spell it), 4 SwiGLU experts in every layer, top-2 picked on the
        # sigmoid scores plus the score-correction bias (a buffer: perturbed below), renormalised;
        # experts 32 wide (intermediate_size), so that the fixture stays small.
        return MiniMaxM2ForCausalLM, MiniMaxM2Config(
            **dict(common, intermediate_size=32),
            rms_norm_eps=1e-6,
            tie_word_embeddings=False,
            rotary_dim=8,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            num_local_experts=4,
            num_experts_per_tok=2,
        )
    if kind == "hunyuan_v1_moe":
        # Per-head q/k RMSNorm after RoPE, q/k/v/o biases, 4 SwiGLU experts (32 wide) in every
        # layer routed softmax -> top-k -> renormalised with a top-k per layer (2, then 1), and
        # the shared expert.
        return HunYuanMoEV1ForCausalLM, HunYuanMoEV1Config(
            **dict(common, intermediate_size=32),
            rms_norm_eps=1e-5,
            attention_bias=True,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            num_experts=4,
            moe_topk=[2, 1],
        )
    if kind == "dbrx":
        # Bias-free LayerNorm, fused Wqkv (2 kv heads) clamped to clip_qkv 1.0, RoPE theta 1e4,
        # 4 SwiGLU experts (32 wide) stored flat (w1, v1, w2) routed softmax -> top-2 ->
        # L1-renormalised, untied.
        return DbrxForCausalLM, DbrxConfig(
            vocab_size=vocab,
            d_model=DIMS["hidden_size"],
            n_heads=DIMS["num_attention_heads"],
            n_layers=DIMS["num_hidden_layers"],
            max_seq_len=DIMS["max_position_embeddings"],
            attn_config={"kv_n_heads": DIMS["num_key_value_heads"], "clip_qkv": 1.0, "rope_theta": 10000.0},
            ffn_config={"ffn_hidden_size": 32, "moe_num_experts": 4, "moe_top_k": 2},
            tie_word_embeddings=False,
            **ids,
        )
    if kind == "apertus":
        # Per-head q/k norms, ungated xIELU MLP (its alpha_p/alpha_n perturbed as weights, its
        # beta buffer moved off 0.5 by perturb), llama3 RoPE with theta 1.2e7, untied.
        return ApertusForCausalLM, ApertusConfig(
            **common,
            rms_norm_eps=1e-5,
            attention_bias=False,
            tie_word_embeddings=False,
            rope_parameters={
                "rope_type": "llama3",
                "rope_theta": 12000000.0,
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 32,
            },
        )
    if kind == "apertus1p5_text":
        # Apertus (as above, default RoPE) with its LM head pruned to the first vocab - 40 ids:
        # logits narrower than the embedding table, which the prompt's ids still index whole.
        return Apertus1p5TextForCausalLM, Apertus1p5TextConfig(
            **common,
            output_vocab_size=vocab - 40,
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
    if kind == "glm":
        # Interleaved RoPE on half of each head (8 of 16 channels), q/k/v biases, fused
        # gate_up_proj, untied.
        return GlmForCausalLM, GlmConfig(
            **common,
            rms_norm_eps=1e-5,
            attention_bias=True,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
        )
    if kind == "glm4":
        # GLM's layout (interleaved RoPE on half of each head, q/k/v biases, fused gate_up_proj)
        # with a norm on each block's output as well as its input, untied.
        return Glm4ForCausalLM, Glm4Config(
            **common,
            rms_norm_eps=1e-5,
            attention_bias=True,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
        )
    if kind == "exaone_moe":
        # EXAONE 4's attention in pre-norm blocks: layer 0 slides (window 5) with RoPE and has
        # a dense MLP (first_k_dense_replace 1), layer 1 is global without position embedding
        # and has 4 experts of width 32 in 2 groups of 2 (the best group competing), sigmoid
        # router with its correction bias, top-2 renormalised and scaled by 2.5, one shared
        # expert; untied.
        return ExaoneMoeForCausalLM, ExaoneMoeConfig(
            **common,
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
            sliding_window=5,
            sliding_window_pattern=2,
            first_k_dense_replace=1,
            moe_intermediate_size=32,
            num_experts=4,
            num_experts_per_tok=2,
            n_group=2,
            topk_group=1,
            num_shared_experts=1,
            norm_topk_prob=True,
            routed_scaling_factor=2.5,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        )
    if kind == "exaone4":
        # Layer 0 slides (window 5 < prompt + generated) with RoPE (llama3 scaling), layer 1 is
        # global without position embedding; post-norm blocks, per-head q/k norms, tied. The
        # string sliding_window_pattern (as EXAONE 4 checkpoints spell it) rides along with
        # layer_types, which transformers reads instead.
        return Exaone4ForCausalLM, Exaone4Config(
            **common,
            rms_norm_eps=1e-5,
            tie_word_embeddings=True,
            sliding_window=5,
            sliding_window_pattern="LG",
            layer_types=["sliding_attention", "full_attention"],
            rope_parameters={
                "rope_type": "llama3",
                "rope_theta": 1000000.0,
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 32,
            },
        )
    if kind == "olmo":
        # LayerNorms without parameters; clip_qkv small enough to clamp many q/k/v values.
        return OlmoForCausalLM, OlmoConfig(
            **common,
            clip_qkv=1.5,
            attention_bias=False,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
    if kind == "olmo2":
        return Olmo2ForCausalLM, Olmo2Config(
            **common,
            rms_norm_eps=1e-6,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
        )
    if kind == "olmo3":
        # Layer 0 slides (window 5 < prompt + generated) and rotates with theta 1e4; layer 1 is
        # global with YaRN (factor 4 over an original context of 32) on theta 5e5.
        return Olmo3ForCausalLM, Olmo3Config(
            **common,
            rms_norm_eps=1e-6,
            tie_word_embeddings=False,
            sliding_window=5,
            layer_types=["sliding_attention", "full_attention"],
            rope_parameters={
                "full_attention": {
                    "rope_type": "yarn",
                    "rope_theta": 500000.0,
                    "factor": 4.0,
                    "original_max_position_embeddings": 32,
                },
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            },
        )
    if kind == "phi3":
        # LongRoPE with a small original context: the 12-token prompt (and generation) use
        # the long factors; reference.json's short_prompt (the first 8 tokens) the short ones.
        half = DIMS["head_dim"] // 2
        return Phi3ForCausalLM, Phi3Config(
            **common,
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
            sliding_window=None,
            original_max_position_embeddings=PHI3_ORIGINAL_MAX,
            rope_parameters={
                "rope_type": "longrope",
                "rope_theta": 10000.0,
                "short_factor": [1.0 + 0.1 * j for j in range(half)],
                "long_factor": [1.5 + 2.0 * j for j in range(half)],
                "original_max_position_embeddings": PHI3_ORIGINAL_MAX,
            },
        )
    if kind == "mixtral":
        # 4 experts of width 64 (keeps the checkpoint under 1 MB), each token routed to 2
        # (renormalised), in both layers.
        return MixtralForCausalLM, MixtralConfig(
            **dict(common, intermediate_size=64),
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
            num_local_experts=4,
            num_experts_per_tok=2,
            sliding_window=None,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        )
    if kind == "qwen2_moe":
        # 3 layers: 0 and 2 MoE (4 experts of width 32, top-2 without renormalisation, a
        # shared expert of width 48 behind its sigmoid gate), 1 dense (mlp_only_layers).
        return Qwen2MoeForCausalLM, Qwen2MoeConfig(
            **dict(common, num_hidden_layers=3, intermediate_size=96),
            rms_norm_eps=1e-6,
            tie_word_embeddings=False,
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            shared_expert_intermediate_size=48,
            norm_topk_prob=False,
            decoder_sparse_step=1,
            mlp_only_layers=[1],
            use_sliding_window=False,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        )
    if kind == "qwen3_moe":
        # decoder_sparse_step 2: layer 1 MoE (4 experts of width 32, top-2 renormalised),
        # layer 0 dense; per-head q/k norms.
        return Qwen3MoeForCausalLM, Qwen3MoeConfig(
            **dict(common, intermediate_size=96),
            rms_norm_eps=1e-6,
            tie_word_embeddings=False,
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            norm_topk_prob=True,
            decoder_sparse_step=2,
            use_sliding_window=False,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        )
    if kind == "olmoe":
        # 4 experts of width 32 (intermediate_size is the expert width), top-2 without
        # renormalisation; full-width q/k RMSNorm, q/k/v clamped to clip_qkv (small enough to
        # bite on random weights).
        return OlmoeForCausalLM, OlmoeConfig(
            **dict(common, intermediate_size=32),
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
            num_experts=4,
            num_experts_per_tok=2,
            norm_topk_prob=False,
            clip_qkv=0.5,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
    if kind == "granitemoe":
        # Granite's multipliers around 4 experts of width 32 stored stacked (input_linear
        # [E, 2I, H], output_linear [E, H, I]), top-2 (softmax of the top-k logits).
        return GraniteMoeForCausalLM, GraniteMoeConfig(
            **dict(common, intermediate_size=32),
            rms_norm_eps=1e-6,
            tie_word_embeddings=True,
            num_local_experts=4,
            num_experts_per_tok=2,
            embedding_multiplier=3.0,
            residual_multiplier=0.5,
            attention_multiplier=0.125,
            logits_scaling=2.0,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
    if kind == "phimoe":
        # 4 experts of width 32 (stored per expert, w1/w3/w2), sparsemixer top-2 routing with a
        # jitter eps of 0.2 (Phi-3.5-MoE: 0.01) so that its masks keep several experts; LayerNorm
        # with bias, q/k/v/o and LM head biases; LongRoPE whose original context (64) holds the
        # prompt and its generation (short factors), its mscale (1.2) differing from the
        # attention factor transformers would compute.
        half = DIMS["head_dim"] // 2
        return PhimoeForCausalLM, PhimoeConfig(
            **dict(common, intermediate_size=32),
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
            num_local_experts=4,
            num_experts_per_tok=2,
            router_jitter_noise=0.2,
            attention_bias=True,
            lm_head_bias=True,
            sliding_window=None,
            rope_parameters={
                "rope_type": "longrope",
                "rope_theta": 10000.0,
                "short_factor": [1.0 + 0.1 * j for j in range(half)],
                "long_factor": [1.5 + 2.0 * j for j in range(half)],
                "short_mscale": 1.2,
                "long_mscale": 1.2,
                "original_max_position_embeddings": PHIMOE_ORIGINAL_MAX,
            },
        )
    if kind == "gpt_oss":
        # 2 layers, sliding (window 4, shorter than the prompt) then full; attention sinks and
        # biases; YaRN (factor 8 over an original context of 16, not truncated); 4 experts of
        # width 32 with biases, top-2 (softmax of the top-k logits); a SwiGLU clamp of 1.0 so
        # that the clamps bite on random weights.
        return GptOssForCausalLM, GptOssConfig(
            **dict(common, intermediate_size=32),
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
            num_local_experts=4,
            num_experts_per_tok=2,
            sliding_window=4,
            layer_types=["sliding_attention", "full_attention"],
            attention_bias=True,
            swiglu_limit=1.0,
            rope_parameters={
                "rope_type": "yarn",
                "rope_theta": 150000.0,
                "factor": 8.0,
                "beta_fast": 32.0,
                "beta_slow": 1.0,
                "truncate": False,
                "original_max_position_embeddings": 16,
            },
        )
    if kind in BERT_LM:
        cls_name, cfg_name, extra = BERT_LM[kind]
        dims = {k: v for k, v in common.items() if k not in ("head_dim", "num_key_value_heads")}
        return getattr(transformers, cls_name), getattr(transformers, cfg_name)(**dims, is_decoder=True, **extra)
    if kind in BART_LM:
        cls_name, cfg_name, extra = BART_LM[kind]
        dims = dict(
            d_model=DIMS["hidden_size"], decoder_layers=DIMS["num_hidden_layers"],
            decoder_attention_heads=DIMS["num_attention_heads"], decoder_ffn_dim=DIMS["intermediate_size"],
            encoder_layers=DIMS["num_hidden_layers"], encoder_attention_heads=DIMS["num_attention_heads"],
            encoder_ffn_dim=DIMS["intermediate_size"], max_position_embeddings=DIMS["max_position_embeddings"],
        )
        # forced_eos_token_id (2 in BartConfig) would make generate end on EOS at max_length.
        cfg = getattr(transformers, cfg_name)(vocab_size=vocab, **ids, **dims, forced_eos_token_id=None, **extra)
        return getattr(transformers, cls_name), cfg
    if kind in ("deepseek_v3", "deepseek_v2"):
        # Multi-head latent attention: 4 heads of 16 + 16 q/k channels (the rope half
        # interleaved) and 16 v channels, a q rank of 24 (deepseek_v2: a plain q_proj) and a
        # latent of 32. Layer 0 dense, layer 1 MoE: 8 experts of width 32 in 4 groups, 2 groups
        # kept, top-2, plus one shared expert. deepseek_v3: sigmoid router with its correction
        # bias, renormalised, times 2.5; YaRN (factor 4 over an original context of 32) whose
        # mscale_all_dim (0.8) scales the softmax and, against mscale 1, the cos/sin.
        # deepseek_v2: softmax router, group_limited_greedy, times 1.5; plain RoPE.
        mla = dict(
            common,
            num_key_value_heads=4,
            intermediate_size=64,
            kv_lora_rank=32,
            qk_nope_head_dim=16,
            qk_rope_head_dim=16,
            v_head_dim=16,
            n_routed_experts=8,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            n_shared_experts=1,
            n_group=4,
            topk_group=2,
            first_k_dense_replace=1,
            rms_norm_eps=1e-6,
            tie_word_embeddings=False,
        )
        if kind == "deepseek_v2":
            return DeepseekV2ForCausalLM, DeepseekV2Config(
                **mla,
                q_lora_rank=None,
                topk_method="group_limited_greedy",
                routed_scaling_factor=1.5,
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            )
        return DeepseekV3ForCausalLM, DeepseekV3Config(
            **mla,
            q_lora_rank=24,
            norm_topk_prob=True,
            routed_scaling_factor=2.5,
            rope_parameters={
                "rope_type": "yarn",
                "rope_theta": 10000.0,
                "factor": 4.0,
                "original_max_position_embeddings": 32,
                "mscale": 1.0,
                "mscale_all_dim": 0.8,
            },
        )
    if kind == "longcat_flash":
        # Two MLA sublayers per layer (4 heads of 16 + 16 q/k channels, the rope half
        # interleaved, 16 v channels, q rank 24, latent 32; the LoRA scales sqrt(64/24) on q and
        # sqrt(64/32) on the latent), two SwiGLU MLPs of 32 and the shortcut MoE: 4 experts of
        # width 32 (a multiple of the quantization blocks) plus 2 zero (identity) experts, top-2 of the softmax over all 6 picked with
        # the correction bias, weights times 6 (the default). 2 layers: 4 caches.
        return LongcatFlashForCausalLM, LongcatFlashConfig(
            **{k: v for k, v in common.items() if k not in ("num_hidden_layers", "intermediate_size", "num_key_value_heads", "head_dim")},
            num_layers=2,
            num_key_value_heads=4,
            head_dim=16,
            ffn_hidden_size=32,
            q_lora_rank=24,
            kv_lora_rank=32,
            qk_nope_head_dim=16,
            qk_rope_head_dim=16,
            v_head_dim=16,
            n_routed_experts=4,
            zero_expert_num=2,
            moe_topk=2,
            expert_ffn_hidden_size=32,
            rms_norm_eps=1e-6,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
    if kind == "axk1":
        # DeepSeek-V3's MLA (4 heads of 16 + 16 q/k channels, rope pairs interleaved, 16 v
        # channels, q rank 24, latent 32); layer 0 dense, layer 1 MoE (first_k_dense_replace
        # 1: 8 experts of width 32 in 4 groups, 2 kept, top-2, sigmoid router without
        # correction, renormalised, times 2.5 by default, one shared expert), its output
        # through post_mlp_layernorm; untied.
        return AXK1ForCausalLM, AXK1Config(
            **dict(common, num_key_value_heads=4, intermediate_size=64),
            q_lora_rank=24,
            kv_lora_rank=32,
            qk_nope_head_dim=16,
            qk_rope_head_dim=16,
            v_head_dim=16,
            n_routed_experts=8,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            n_shared_experts=1,
            n_group=4,
            topk_group=2,
            first_k_dense_replace=1,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
    if kind == "glm4_moe":
        # Layer 0 dense, layer 1 MoE (8 experts of width 32 in 2 groups, 1 kept, top-2, sigmoid
        # router with its correction bias, renormalised, times 1.5, one shared expert); partial
        # RoPE (the default 0.5 of each head), q/k/v biases, per-head q/k RMSNorm.
        return Glm4MoeForCausalLM, Glm4MoeConfig(
            **dict(common, intermediate_size=64),
            moe_intermediate_size=32,
            n_routed_experts=8,
            num_experts_per_tok=2,
            n_shared_experts=1,
            n_group=2,
            topk_group=1,
            routed_scaling_factor=1.5,
            first_k_dense_replace=1,
            attention_bias=True,
            use_qk_norm=True,
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
    if kind == "sarvam_moe":
        # GLM-4.5-MoE's model with Sarvam's defaults: 2 heads of 64 (head_dim's default; one KV
        # head), RoPE over the whole head (partial_rotary_factor's default 1.0), per-head q/k
        # RMSNorm (use_qk_norm's default), q/k/v biases; layer 0 dense, layer 1 MoE (8 experts of width
        # 32, top-2, sigmoid router with its correction bias, times 2.5, one shared expert).
        # Stored in the v4 spelling with the original config's names (rewrite_config_v4:
        # num_experts, num_shared_experts, use_qkv_bias).
        common = {k: v for k, v in common.items() if k != "head_dim"}
        return SarvamMoeForCausalLM, SarvamMoEConfig(
            **dict(common, intermediate_size=64, num_attention_heads=2, num_key_value_heads=1),
            moe_intermediate_size=32,
            n_routed_experts=8,
            num_experts_per_tok=2,
            n_shared_experts=1,
            attention_bias=True,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
    if kind == "param2moe":
        # GLM-4.5-MoE's model with Param2's defaults: RoPE over the whole head, per-head q/k
        # RMSNorm, no attention biases, tied; layer 0 dense, layer 1 MoE (8 experts of width 32
        # in 2 groups, 1 kept, top-2, times 2.5, two shared experts).
        return Param2MoeForCausalLM, Param2MoeConfig(
            **dict(common, intermediate_size=64),
            moe_intermediate_size=32,
            n_routed_experts=8,
            num_experts_per_tok=2,
            n_group=2,
            topk_group=1,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
    if kind == "hy_v3":
        # Per-head q/k RMSNorm, biases on q/k/v/o and the MLPs (dense and shared); layer 0 MoE,
        # layer 1 dense (mlp_layer_types: the default has them the other way); 8 experts of width 32, top-2, sigmoid router
        # with its correction bias, renormalised, times 1.7, two shared experts (width 64).
        return HYV3ForCausalLM, HYV3Config(
            **dict(common, intermediate_size=64),
            num_experts=8,
            num_experts_per_tok=2,
            num_shared_experts=2,
            moe_intermediate_size=32,
            router_scaling_factor=1.7,
            mlp_layer_types=["sparse", "dense"],
            attention_bias=True,
            mlp_bias=True,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
    if kind == "minicpm5_moe":
        # Gated attention (q_proj holds each head's query and gate rows) with q/k/v/o biases,
        # RoPE over the whole head; layer 0 dense, layer 1 MoE (first_k_dense_replace 1: 8
        # experts of width 32 in 2 groups, 1 kept, top-2, sigmoid router with correction bias,
        # renormalised, times 2.0, one shared expert), untied.
        return MiniCPM5MoeForCausalLM, MiniCPM5MoeConfig(
            **dict(common, intermediate_size=64),
            moe_intermediate_size=32,
            n_routed_experts=8,
            num_experts_per_tok=2,
            n_shared_experts=1,
            n_group=2,
            topk_group=1,
            routed_scaling_factor=2.0,
            attention_bias=True,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
    if kind == "glm4_moe_lite":
        # Multi-head latent attention with v as wide as q/k (16 + 16 and 32: no widening), the
        # rope halves not interleaved; layer 0 MoE and layer 1 dense (mlp_layer_types); 8 experts
        # of width 32, top-2, no group limit, times 1.8, one shared expert.
        return Glm4MoeLiteForCausalLM, Glm4MoeLiteConfig(
            **dict(common, num_key_value_heads=4, intermediate_size=64),
            q_lora_rank=24,
            kv_lora_rank=32,
            qk_nope_head_dim=16,
            qk_rope_head_dim=16,
            v_head_dim=32,
            rope_interleave=False,
            moe_intermediate_size=32,
            n_routed_experts=8,
            num_experts_per_tok=2,
            n_shared_experts=1,
            mlp_layer_types=["sparse", "dense"],
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
    if kind == "axk2":
        # A.X-K2: the deepseek_v32 fixture's sparse MLA (index_topk 4, 16 indexer heads of 32
        # channels, half-split indexer RoPE) with q and the per-head output gate from
        # q_gate_proj, gated RMSNorms (rank 8) on every layer's input and on the MoE layer's
        # post-attention norm, layer 0 dense, layer 1 8 experts without groups, q/kv biases.
        return transformers.AXK2ForCausalLM, transformers.AXK2Config(
            **dict(common, num_key_value_heads=4, intermediate_size=64),
            q_lora_rank=24,
            kv_lora_rank=32,
            qk_nope_head_dim=16,
            qk_rope_head_dim=16,
            v_head_dim=16,
            n_routed_experts=8,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            n_shared_experts=1,
            mlp_layer_types=["dense", "sparse"],
            index_topk=4,
            index_head_dim=32,
            index_n_heads=16,
            gated_norm_rank=8,
            attention_bias=True,
            rms_norm_eps=1e-6,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
    if kind in ("deepseek_v32", "glm_moe_dsa"):
        # DeepSeek Sparse Attention: DeepSeek-V3's MLA (4 heads of 16 + 16 q/k channels, 16 v
        # channels, q rank 24, latent 32) and experts (layer 0 dense, layer 1 8 experts of
        # width 32, top-2, one shared expert), each query attending to the index_topk = 4 keys
        # its indexer (16 heads of 32 channels, the first 16 rotated) scores best: fewer than
        # the prompt's tokens, so the selection changes the logits of every row past the 4th
        # and of every decode step. deepseek_v32: 4 groups of experts, 2 kept, YaRN (as the
        # deepseek_v3 fixture); glm_moe_dsa: layer 1 reuses layer 0's selection
        # (indexer_types), its indexer's rope pairs interleaved.
        dsa = dict(
            common,
            num_key_value_heads=4,
            intermediate_size=64,
            q_lora_rank=24,
            kv_lora_rank=32,
            qk_nope_head_dim=16,
            qk_rope_head_dim=16,
            v_head_dim=16,
            n_routed_experts=8,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            n_shared_experts=1,
            first_k_dense_replace=1,
            index_topk=4,
            index_head_dim=32,
            index_n_heads=16,
            tie_word_embeddings=False,
        )
        if kind == "glm_moe_dsa":
            return transformers.GlmMoeDsaForCausalLM, transformers.GlmMoeDsaConfig(
                **dsa,
                rms_norm_eps=1e-5,
                indexer_types=["full", "shared"],
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            )
        return transformers.DeepseekV32ForCausalLM, transformers.DeepseekV32Config(
            **dsa,
            n_group=4,
            topk_group=2,
            rms_norm_eps=1e-6,
            rope_parameters={
                "rope_type": "yarn",
                "rope_theta": 10000.0,
                "factor": 4.0,
                "original_max_position_embeddings": 32,
                "mscale": 1.0,
                "mscale_all_dim": 0.8,
            },
        )
    if kind == "sarvam_mla":
        # DeepSeek-V3's architecture with Sarvam's defaults (a plain q_proj, no group limit): 4
        # heads of 16 + 16 q/k and 16 v channels, layer 0 dense, layer 1 MoE (8 experts of width
        # 32, top-2, renormalised, times 2.5, one shared expert); YaRN whose mscale_all_dim
        # scales the softmax. Stored with the original config's expert counts (rewrite_config_v4:
        # num_experts, num_shared_experts; transformers 5.25 cannot reload its `deepseek_yarn`).
        return SarvamMLAForCausalLM, SarvamMLAConfig(
            **dict(common, num_key_value_heads=4, intermediate_size=64),
            kv_lora_rank=32,
            qk_nope_head_dim=16,
            qk_rope_head_dim=16,
            v_head_dim=16,
            n_routed_experts=8,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            n_shared_experts=1,
            first_k_dense_replace=1,
            rms_norm_eps=1e-6,
            tie_word_embeddings=False,
            rope_parameters={
                "rope_type": "yarn",
                "rope_theta": 10000.0,
                "factor": 4.0,
                "original_max_position_embeddings": 32,
                "mscale": 1.0,
                "mscale_all_dim": 1.0,
            },
        )
    if kind == "dots1":
        # Qwen3's attention with layer 1 sliding (window 5, shorter than the prompt); layer 0
        # dense, layer 1 MoE (8 experts of width 32 in 2 groups, 1 kept, top-2, sigmoid router
        # with its correction bias, not renormalised, one shared expert).
        return Dots1ForCausalLM, Dots1Config(
            **dict(common, intermediate_size=64),
            moe_intermediate_size=32,
            n_routed_experts=8,
            num_experts_per_tok=2,
            n_shared_experts=1,
            n_group=2,
            topk_group=1,
            first_k_dense_replace=1,
            sliding_window=5,
            max_window_layers=1,
            rms_norm_eps=1e-6,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
    if kind == "minicpm3":
        # Multi-head latent attention (q rank 24, latent 32, 16 + 16 q/k channels with the rope
        # halves not interleaved, v_head_dim null: 64 / 4 = 16) in a dense decoder; embeddings
        # times 12, residual branches times 1.4 / sqrt(2), hidden states divided by 64 / 16
        # before the tied head.
        return MiniCPM3ForCausalLM, MiniCPM3Config(
            **dict(common, num_key_value_heads=4),
            q_lora_rank=24,
            kv_lora_rank=32,
            qk_nope_head_dim=16,
            qk_rope_head_dim=16,
            v_head_dim=None,
            scale_emb=12,
            scale_depth=1.4,
            dim_model_base=16,
            rms_norm_eps=1e-5,
            tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
    if kind == "youtu":
        # DeepSeek-V3's multi-head latent attention (q rank 24, latent 32, 16 + 16 q/k channels,
        # rope pairs interleaved, 16 v channels: widened in the cache) with attention biases, in
        # a dense Llama-style decoder with a SwiGLU MLP and a tied head.
        return YoutuForCausalLM, YoutuConfig(
            **dict(common, num_key_value_heads=4),
            q_lora_rank=24,
            kv_lora_rank=32,
            qk_nope_head_dim=16,
            qk_rope_head_dim=16,
            v_head_dim=16,
            attention_bias=True,
            rms_norm_eps=1e-6,
            tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
    if kind == "llama4_text":
        # A RoPE layer (interleaved pairs, weightless q/k norm) attending in chunks of 4 tokens,
        # with 4 experts 32 wide (top-2 of the sigmoid router, each expert's input scaled by its
        # score) and the shared expert; then a NoPE layer attending to every key with its q
        # scaled by the temperature tuning (floor_scale 4: from position 3 on) and a dense MLP
        # of intermediate_size_mlp. q/k/v/o biases.
        return Llama4ForCausalLM, Llama4TextConfig(
            **dict(common, intermediate_size=32),
            intermediate_size_mlp=96,
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
            attention_bias=True,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            num_local_experts=4,
            num_experts_per_tok=2,
            moe_layers=[0],
            no_rope_layers=[1, 0],
            attention_chunk_size=4,
            attn_temperature_tuning=True,
            floor_scale=4,
            attn_scale=0.5,
        )
    if kind == "afmoe":
        # A sliding-window layer (window 4, RoPE) with a dense MLP, then a full-attention NoPE
        # layer with 4 experts 32 wide (top-2 of the sigmoid scores plus the expert bias,
        # renormalised, times route_scale 2.5) and one shared expert; sandwich norms, per-head
        # q/k RMSNorm, sigmoid-gated attention output, q/k/v/o biases, embeddings times
        # sqrt(hidden) (mup_enabled).
        return AfmoeForCausalLM, AfmoeConfig(
            **common,
            moe_intermediate_size=32,
            num_dense_layers=1,
            num_experts=4,
            num_experts_per_tok=2,
            num_shared_experts=1,
            route_scale=2.5,
            global_attn_every_n_layers=2,
            sliding_window=4,
            mup_enabled=True,
            attention_bias=True,
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
    if kind == "aria_text":
        # Llama attention with q/k/v/o biases; in every layer 4 SwiGLU experts 32 wide stored
        # [in, out] (fc1 = gate | up, fc2 = down), top-2 of the router logits weighted by their
        # softmax, plus two experts' worth of shared SwiGLU with MLP biases.
        return AriaTextForCausalLM, AriaTextConfig(
            **dict(common, intermediate_size=32),
            moe_num_experts=4,
            moe_topk=2,
            moe_num_shared_experts=2,
            attention_bias=True,
            mlp_bias=True,
            rms_norm_eps=1e-6,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
    if kind == "kolibri1":
        # A sliding-window layer (window 4, RoPE) then a full-attention NoPE layer, GLM-4's four
        # norms, per-head q/k RMSNorm; in both, 4 SwiGLU experts 32 wide picked top-2 on the
        # logits plus the correction bias (a buffer: perturbed), weighted by their sigmoids (not
        # renormalised), and a shared expert 48 wide.
        return Kolibri1ForCausalLM, Kolibri1Config(
            **{k: v for k, v in common.items() if k != "intermediate_size"},
            moe_intermediate_size=32,
            shared_expert_intermediate_size=48,
            num_experts=4,
            num_experts_per_tok=2,
            sliding_window=4,
            layer_types=["sliding_attention", "full_attention"],
            rms_norm_eps=1e-6,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
    if kind == "flint":
        # A sliding-window layer (window 4, RoPE) with a dense MLP, then a full-attention NoPE
        # layer with 4 SwiGLU experts 32 wide (top-2 of the router's sigmoids, renormalised) and
        # an ungated shared expert 48 wide; attention sinks and per-head q/k RMSNorm in both.
        return FlintForCausalLM, FlintConfig(
            **dict(common, intermediate_size=64),
            moe_intermediate_size=32,
            shared_expert_intermediate_size=48,
            num_experts=4,
            num_experts_per_tok=2,
            mlp_only_layers=[0],
            sliding_window=4,
            layer_types=["sliding_attention", "full_attention"],
            rms_norm_eps=1e-6,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
    if kind == "laguna":
        # A sliding-window layer (window 4, whole-head RoPE theta 1e4) with 4 query heads and a
        # dense MLP, then a full-attention layer (RoPE theta 5e5 on half of each head) with 8
        # query heads and 4 SwiGLU experts 32 wide (top-2 of the sigmoid scores plus the
        # correction bias, renormalised, times 1.5) plus a shared expert 48 wide; per-head q/k
        # RMSNorm, softplus per-head output gate, q/k/v/o biases.
        return LagunaForCausalLM, LagunaConfig(
            **common,
            num_attention_heads_per_layer=[4, 8],
            layer_types=["sliding_attention", "full_attention"],
            mlp_layer_types=["dense", "sparse"],
            sliding_window=4,
            moe_intermediate_size=32,
            shared_expert_intermediate_size=48,
            num_experts=4,
            num_experts_per_tok=2,
            moe_routed_scaling_factor=1.5,
            attention_bias=True,
            rms_norm_eps=1e-6,
            tie_word_embeddings=False,
            rope_parameters={
                "full_attention": {"rope_type": "default", "rope_theta": 500000.0, "partial_rotary_factor": 0.5},
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            },
        )
    if kind == "beam":
        # A sliding-window layer (window 4, RoPE) with a dense MLP, then a full-attention NoPE
        # layer (queries scaled by position) with 4 SwiGLU experts 32 wide in 2 groups (top-1
        # group by its two best corrected sigmoid scores, then the top-2 experts, renormalised,
        # times 2.5); sandwich norms, depth-scaled residual adds, per-head q/k RMSNorm, sigmoid
        # output gate with a per-head bias, final logits soft-capped at 5.
        return BeamForCausalLM, BeamConfig(
            **common,
            layer_types=["sliding_attention", "full_attention"],
            mlp_layer_types=["dense", "sparse"],
            sliding_window=4,
            moe_intermediate_size=32,
            num_experts=4,
            num_experts_per_tok=2,
            n_group=2,
            topk_group=1,
            routed_scaling_factor=2.5,
            final_logit_softcapping=5.0,
            rms_norm_eps=1e-6,
            tie_word_embeddings=False,
            rope_parameters={
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                "full_attention": None,
            },
        )
    if kind == "mimo_v2_flash":
        # A sliding-window layer (window 4) with 2 key/value heads, attention sinks and a dense
        # MLP, then a full-attention layer with 1 key/value head and 4 SwiGLU experts 32 wide in
        # 2 groups (top-1 group, top-2 experts of the corrected sigmoid scores, renormalised,
        # times 1.5); q/k heads 16 wide, v heads 8 wide scaled by 0.707, RoPE on half of each
        # head (theta 1e4 sliding, 5e6 full), q/k/v biases.
        return MiMoV2FlashForCausalLM, MiMoV2FlashConfig(
            **dict(common, num_key_value_heads=1),
            v_head_dim=8,
            layer_types=["sliding_attention", "full_attention"],
            mlp_layer_types=["dense", "sparse"],
            sliding_window=4,
            moe_intermediate_size=32,
            n_routed_experts=4,
            num_experts_per_tok=2,
            n_group=2,
            topk_group=1,
            routed_scaling_factor=1.5,
            attention_bias=True,
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
            rope_parameters={
                "full_attention": {"rope_type": "default", "rope_theta": 5000000.0, "partial_rotary_factor": 0.5},
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
            },
        )
    if kind == "ergo":
        # A sliding-window layer (window 4, interleaved RoPE) with a dense relu2 MLP, then a
        # full-attention NoPE layer (q and k times sqrt(1.5)) with 4 relu2 experts 32 wide, each
        # output RMS-normed with its own weight (top-2 of the corrected sigmoid scores,
        # renormalised, times sqrt(8)) plus a normed relu2 shared expert 48 wide; fused qkv,
        # per-head q/k RMSNorm, sandwich norms, learned residual gates.
        return ErgoForCausalLM, ErgoConfig(
            **{k: v for k, v in common.items() if k not in ("intermediate_size", "head_dim")},
            first_dense_intermediate_size=128,
            num_dense_blocks=1,
            moe_intermediate_size=32,
            shared_intermediate_size=48,
            num_experts=4,
            num_experts_per_tok=2,
            sliding_window=4,
            global_attention_every_n_layers=2,
            global_attention_scale=1.5,
            rms_norm_eps=1e-6,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
    raise ValueError(kind)


# The decoders of BART-style seq2seq models alone (mobius's bart_lm family): name -> (model
# class, config class, config fields); *ForCausalLM saves is_decoder true.
BART_LM = {
    "bart": ("BartForCausalLM", "BartConfig", dict(scale_embedding=False)),
    "mbart": ("MBartForCausalLM", "MBartConfig", dict(scale_embedding=True)),
    "plbart": ("PLBartForCausalLM", "PLBartConfig", dict(scale_embedding=True, activation_function="gelu_new",
                                                         tie_word_embeddings=False)),
    "mvp": ("MvpForCausalLM", "MvpConfig", dict(scale_embedding=False)),
    "blenderbot": ("BlenderbotForCausalLM", "BlenderbotConfig", dict(scale_embedding=True)),
    "blenderbot-small": ("BlenderbotSmallForCausalLM", "BlenderbotSmallConfig", dict(scale_embedding=False)),
    "marian": ("MarianForCausalLM", "MarianConfig", dict(scale_embedding=True)),
    "pegasus": ("PegasusForCausalLM", "PegasusConfig", dict(scale_embedding=True)),
    "trocr": ("TrOCRForCausalLM", "TrOCRConfig", dict(scale_embedding=True, tie_word_embeddings=False)),
}


# Causal LMs of encoder architectures (mobius's bert_lm family): name -> (model class, config
# class, config fields). is_decoder is set for all; each covers one model type's layout (weight
# names, norms, positions, head), and between them the variants: tied and untied heads,
# token types of 1 and 2 rows, exact and tanh GELU.
BERT_LM = {
    "bert-causal": ("BertLMHeadModel", "BertConfig", dict(type_vocab_size=2, layer_norm_eps=1e-12)),
    "roberta-causal": ("RobertaForCausalLM", "RobertaConfig", dict(type_vocab_size=1, layer_norm_eps=1e-5)),
    "camembert": ("CamembertForCausalLM", "CamembertConfig", dict(type_vocab_size=1, layer_norm_eps=1e-5)),
    "xlm-roberta": ("XLMRobertaForCausalLM", "XLMRobertaConfig",
                    dict(type_vocab_size=1, layer_norm_eps=1e-5, hidden_act="gelu_new")),
    "data2vec-text": ("Data2VecTextForCausalLM", "Data2VecTextConfig", dict(type_vocab_size=2, layer_norm_eps=1e-5)),
    "roberta-prelayernorm": ("RobertaPreLayerNormForCausalLM", "RobertaPreLayerNormConfig",
                             dict(type_vocab_size=1, layer_norm_eps=1e-5)),
    "xlm-roberta-xl": ("XLMRobertaXLForCausalLM", "XLMRobertaXLConfig", dict(type_vocab_size=1, layer_norm_eps=1e-5)),
    "ernie": ("ErnieForCausalLM", "ErnieConfig", dict(use_task_id=True, task_type_vocab_size=3)),
    "megatron-bert": ("MegatronBertForCausalLM", "MegatronBertConfig", dict(layer_norm_eps=1e-12)),
    "electra": ("ElectraForCausalLM", "ElectraConfig", dict(embedding_size=32)),
    "rembert": ("RemBertForCausalLM", "RemBertConfig",
                dict(input_embedding_size=32, output_embedding_size=48, tie_word_embeddings=False)),
    "bert-generation": ("BertGenerationDecoder", "BertGenerationConfig", dict(tie_word_embeddings=False)),
    "roformer": ("RoFormerForCausalLM", "RoFormerConfig", dict(embedding_size=48)),
    # The word embedding concatenated with shape and pronunciation id 0's rows, mapped back.
    "roc_bert": ("RoCBertForCausalLM", "RoCBertConfig",
                 dict(shape_embed_dim=24, shape_vocab_size=40, pronunciation_embed_dim=16,
                      pronunciation_vocab_size=30)),
}


def perturb_bert_lm(model, seed: int) -> None:
    """perturb() for the encoder-architecture causal LMs: LayerNorm weights near 1 (their names
    are `LayerNorm`, `layer_norm`, `ln`), biases and embeddings small."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not p.requires_grad:
                continue  # RoFormer's frozen sinusoidal table: a function, not a weight
            r = torch.randn(p.shape, generator=g, dtype=torch.float32)
            norm = any(k in name for k in ("LayerNorm.", "layer_norm", ".ln.", "self_attn_layer_norm")) \
                or name.startswith("ln.")
            if norm and name.endswith(".weight"):
                v = 1.0 + 0.2 * r
            elif name.endswith("bias"):
                v = 0.1 * r
            elif "embeddings" in name or "decoder.weight" in name or "lm_head.weight" in name:
                # logits of a few units: f16 builds stay well inside 2e-2
                v = 0.1 * r
            else:
                v = 0.15 * r
            p.copy_(v)


# The vision tower of the image-text fixtures: as small as transformers builds one (mobius
# does not export it; it only has to be in the checkpoint).
TINY_VISION = dict(
    hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
    image_size=28, patch_size=14,
)

# Image-text fixtures: the class of their text model alone, whose logits on a text prompt must
# be the image-text model's.
TEXT_MODELS = {"gemma3": Gemma3ForCausalLM, "mistral3": MistralForCausalLM, "qwen3_5": Qwen3_5ForCausalLM,
               "qwen3_5_moe": Qwen3_5MoeForCausalLM}


@torch.no_grad()
def check_text_model(name: str, model, input_ids: list[int], logits) -> None:
    """The image-text model's logits on a text prompt are those of its text model alone."""
    text = TEXT_MODELS[name]._from_config(model.config.text_config, attn_implementation="eager")
    text.model.load_state_dict(model.model.language_model.state_dict())
    text.lm_head.weight.copy_(model.lm_head.weight)
    alone = text.eval()(torch.tensor([input_ids])).logits[0].float()
    assert torch.equal(alone, logits), (name, float((alone - logits).abs().max()))


def perturb(model, seed: int) -> None:
    """Replace the default (near-flat) init with larger random weights."""
    g = torch.Generator().manual_seed(seed)
    # Gemma's RMSNorm and Nemotron's LayerNorm1P scale by (1 + weight): keep their effective
    # gain near 1 as well.
    # Qwen3-Next's RMSNorms too, but not the gated norm of its linear attention (a plain gain);
    # Gemma 4's and Gemma 3n's RMSNorms scale by the weight itself.
    offset_types = ("gemma", "vaultgemma", "nemotron", "qwen3_next", "qwen3_5", "recurrent_gemma")
    model_type = model.config.model_type
    norm_offset = 0.0 if model_type.startswith(offset_types) and not model_type.startswith(("gemma4", "gemma3n")) else 1.0
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("embed_positions.weight") and not p.requires_grad:
                continue  # Marian's and Pegasus' frozen sinusoidal table: a function, not a weight
            r = torch.randn(p.shape, generator=g, dtype=torch.float32)
            # The parameter's own module decides (DBRX's `norm_attn_norm.attn.Wqkv` is no norm).
            module = name.rsplit(".", 1)[0].rsplit(".", 1)[-1]
            if module.isdigit():
                # A module of a ModuleList (LongCat-Flash's `input_layernorm.0`): its list decides.
                module = name.rsplit(".", 2)[0].rsplit(".", 1)[-1]
            if name.endswith("_residual"):
                v = 1.0 + 0.2 * r  # Doge's residual scales (ones at init)
            elif name.endswith("rg_lru.recurrent_param"):
                # RecurrentGemma's decay parameter (softplus of it near 0.05: a = exp(-8·gate·0.05)
                # keeps a long memory, as its init does), each channel its own.
                v = -3.0 + 0.5 * r
            elif module.startswith("ln_") or "norm" in module:
                # RMSNorm gains; LayerNorm (gpt2, phi) weights and biases
                offset = 1.0 if name.endswith("linear_attn.norm.weight") else norm_offset
                v = offset + 0.2 * r if not name.endswith(".bias") else 0.1 * r
            elif name.endswith(".bias"):
                v = 0.1 * r
            elif (
                "embed_tokens" in name or "embed_in" in name or "lm_head" in name or ".wte." in name or ".wpe." in name
                or "tokens_embed" in name or "positions_embed" in name or "embed_positions" in name
                or "word_embeddings." in name
            ):
                # logits of a few units: not flat, yet small enough that f16
                # rounding (ulp 2^-8 at 4) keeps f16 builds well inside 2e-2.
                v = 0.1 * r
            else:
                v = 0.15 * r
            p.copy_(v.to(p.dtype))
        # xIELU's beta is a buffer (Apertus): move it off its default 0.5, so that a build
        # reading the constant instead of the checkpoint's value fails.
        for name, buf in model.named_buffers():
            # Gemma 4's per-layer output multiplier (ones at init).
            if name.endswith("layer_scalar"):
                buf.copy_(1.0 + 0.2 * torch.randn(buf.shape, generator=g, dtype=torch.float32))
            if name.endswith("act_fn.beta"):
                buf.copy_(0.5 + 0.1 * torch.randn(buf.shape, generator=g, dtype=torch.float32))
            # A score-correction bias is a buffer of zeros (MiniMax-M2, ERNIE 4.5 MoE, Solar
            # Open, DeepSeek-V3 and its kin): moved off zero, it shifts which experts are picked, so a build that
            # ignores it fails.
            # LFM2-MoE's `expert_bias` is the same correction under another name.
            if name.endswith("feed_forward.expert_bias") and model.config.model_type == "lfm2_moe":
                buf.copy_(0.15 * torch.randn(buf.shape, generator=g, dtype=torch.float32))
            if name.endswith("e_score_correction_bias") and model.config.model_type not in UNCORRECTED:
                scale = 0.1 if model.config.model_type in DEEPSEEK_ROUTED else 0.15
                buf.copy_(scale * torch.randn(buf.shape, generator=g, dtype=torch.float32))


@torch.no_grad()
def greedy_reference(model, input_ids: list[int], eos_ids: set[int]):
    """Greedy decode with full (cache-free) forwards; returns tokens and min gap."""
    ids = torch.tensor([input_ids])
    prompt_logits = model(ids).logits[0].float()
    gaps = []
    new = []
    cur = ids
    for _ in range(N_NEW):
        last = model(cur).logits[0, -1].float()
        top2 = torch.topk(last, 2).values
        gaps.append(float(top2[0] - top2[1]))
        nxt = int(torch.argmax(last))
        if nxt in eos_ids:
            return None
        new.append(nxt)
        cur = torch.cat([cur, torch.tensor([[nxt]])], dim=1)
    return prompt_logits, new, min(gaps)


@torch.no_grad()
def fresh_rope(model) -> None:
    """Return a dynamic-RoPE model's rotary module to its freshly loaded state: a one-token pass
    (shorter than the original context) resets the frequencies it keeps from longer passes."""
    model(torch.tensor([[0]]))
    rope = model.model.rotary_emb
    assert rope.max_seq_len_cached == rope.original_max_seq_len
    assert torch.equal(rope.inv_freq, rope.original_inv_freq)


@torch.no_grad()
def cached_greedy_reference(model, input_ids: list[int], eos_ids: set[int], pad_id: int):
    """Greedy decode through transformers' generate (KV cache); returns the prompt's logits,
    the tokens, the min gap and the logits of every step (step i's logits chose token i)."""
    fresh_rope(model)
    prompt_logits = model(torch.tensor([input_ids])).logits[0].float()
    fresh_rope(model)
    out = model.generate(
        torch.tensor([input_ids]),
        attention_mask=torch.ones(1, len(input_ids), dtype=torch.long),
        do_sample=False,
        max_new_tokens=N_NEW,
        min_new_tokens=N_NEW,
        pad_token_id=pad_id,
        return_dict_in_generate=True,
        output_logits=True,
    )
    new = out.sequences[0, len(input_ids):].tolist()
    steps = torch.stack([l[0].float() for l in out.logits])
    # min_new_tokens masks the stop tokens: a step whose raw argmax is one is no greedy step.
    if eos_ids & set(new) or steps.argmax(-1).tolist() != new:
        return None
    top2 = torch.topk(steps, 2, dim=-1).values
    gap = float((top2[:, 0] - top2[:, 1]).min())
    return prompt_logits, new, gap, steps


@torch.no_grad()
def hybrid_decode_steps(model, input_ids: list[int], greedy: list[int]) -> dict:
    """The prompt through transformers' cache, then the first HYBRID_DECODE_STEPS greedy tokens
    one at a time: each step's logits (checked against one cache-free forward of the whole
    sequence)."""
    # RecurrentGemma returns no cache (its recurrent states live in its modules): hand it one
    # for its attention layers, as generate does.
    own = transformers.DynamicCache(config=model.config) if model.config.model_type == "recurrent_gemma" else None
    out = model(torch.tensor([input_ids]), use_cache=True, cache=own)
    cache = getattr(out, "cache", own)
    fed = greedy[:HYBRID_DECODE_STEPS]
    steps = []
    # Each step's position, as generate passes it: Bamba's and Granite-4's forward number a
    # call's tokens from 0 when given none, whatever their cache holds.
    positioned = "position_ids" in inspect.signature(model.forward).parameters
    for j, t in enumerate(fed):
        extra = {"position_ids": torch.tensor([[len(input_ids) + j]])} if positioned else {}
        out = model(torch.tensor([[t]]), cache=cache, use_cache=True, **extra)
        cache = getattr(out, "cache", cache)
        steps.append(out.logits[0, -1].float())
    steps = torch.stack(steps)
    full = model(torch.tensor([input_ids + fed])).logits[0, len(input_ids):].float()
    apart = float((full - steps).abs().max())
    assert apart < 1e-5, apart
    return {"input_ids": fed, "logits": [[rnd(v) for v in row] for row in steps.tolist()]}


@torch.no_grad()
def mrope_case(model, input_ids: list[int]) -> dict:
    """The prompt with 3-D multimodal positions whose temporal, height and width rows differ
    (as an image's tokens would), through one forward: Qwen3.5's interleaved MRoPE."""
    n = len(input_ids)
    t = torch.arange(n)
    rows = torch.stack([t, t // 2 + 5, (t * 3) % 17])
    logits = model(torch.tensor([input_ids]), position_ids=rows[:, None, :]).logits[0].float()
    plain = model(torch.tensor([input_ids])).logits[0].float()
    assert float((logits - plain).abs().max()) > 1e-3, "the rows must change the logits"
    return {"position_ids": rows.tolist(), "logits": [[rnd(v) for v in row] for row in logits.tolist()]}


def rnd(x: float) -> float:
    return float(f"{x:.9g}")


def rewrite_config_v4(path: Path) -> None:
    """Rewrite a transformers-5 config.json in transformers-4 spelling."""
    cfg = json.loads(path.read_text())
    out = {}
    for k, v in cfg.items():
        if k == "dtype":
            out["torch_dtype"] = v
        elif k == "layer_types" and cfg.get("model_type") == "gemma2":
            continue  # transformers 4 derived Gemma 2's alternation (even layers slide)
        elif k == "rope_parameters" and cfg.get("model_type") == "gpt_neox":
            # GPT-NeoX's own v4 names (as on the hub's Pythia checkpoints).
            rp = dict(v)
            out["rotary_emb_base"] = rp.pop("rope_theta")
            out["rotary_pct"] = rp.pop("partial_rotary_factor")
            assert rp.get("rope_type", "default") == "default", rp
            out["rope_scaling"] = None
        elif k in ("n_routed_experts", "n_shared_experts", "attention_bias") and cfg.get("model_type") == "sarvam_moe":
            # The original Sarvam config's names (transformers' attribute_map reads them).
            out[{"n_routed_experts": "num_experts", "n_shared_experts": "num_shared_experts",
                 "attention_bias": "use_qkv_bias"}[k]] = v
        elif k in ("n_routed_experts", "n_shared_experts") and cfg.get("model_type") == "sarvam_mla":
            # The original Sarvam config's names (transformers maps them back).
            out[{"n_routed_experts": "num_experts", "n_shared_experts": "num_shared_experts"}[k]] = v
        elif k == "num_local_experts" and cfg.get("model_type") == "qwen3_moe":
            out["num_experts"] = v  # v4's name (v5 maps it back)
        elif k == "rope_scaling" and isinstance(v, dict) and v.get("rope_type") == "longrope":
            # v4's Phi-3 accepts exactly type, short_factor and long_factor.
            out[k] = {"type": "longrope", "short_factor": v["short_factor"], "long_factor": v["long_factor"]}
        elif k == "rope_parameters" and "full_attention" in v:
            # Gemma 3's per-layer-type RoPE: v4 named the local theta `rope_local_base_freq`.
            full, local = dict(v["full_attention"]), dict(v.get("sliding_attention", {}))
            out["rope_theta"] = full.pop("rope_theta")
            out["rope_scaling"] = full if full.get("rope_type", "default") != "default" else None
            if "rope_theta" in local:
                out["rope_local_base_freq"] = local["rope_theta"]
        elif k == "rope_parameters":
            rp = dict(v)
            out["rope_theta"] = rp.pop("rope_theta")
            if "partial_rotary_factor" in rp:  # a top-level field in v4 (phi)
                out["partial_rotary_factor"] = rp.pop("partial_rotary_factor")
            if rp.get("rope_type", "default") == "default" and len(rp) <= 1:
                out["rope_scaling"] = None
            else:
                out["rope_scaling"] = rp
        else:
            out[k] = v
    path.write_text(json.dumps(dict(sorted(out.items())), indent=2) + "\n")


# Fixtures whose config.json gets another model_type than their config class writes: model
# types transformers maps onto another one's classes (gpt-sw3 is GPT-2).
RENAMED_TYPES = {"gpt-sw3": "gpt-sw3"}

# EXAONE 3's hub checkpoints: its config names for three Llama fields and GPT-2-like module
# names (transformers renames both on loading).
EXAONE_CONFIG_NAMES = {
    "num_hidden_layers": "num_layers",
    "rms_norm_eps": "layer_norm_epsilon",
    "hidden_act": "activation_function",
}
EXAONE_MODULE_NAMES = [
    ("model.embed_tokens.", "transformer.wte."),
    ("model.layers.", "transformer.h."),
    ("model.norm.", "transformer.ln_f."),
    (".self_attn.o_proj.", ".attn.attention.out_proj."),
    (".self_attn.", ".attn.attention."),
    (".input_layernorm.", ".ln_1."),
    (".post_attention_layernorm.", ".ln_2."),
    (".mlp.gate_proj.", ".mlp.c_fc_0."),
    (".mlp.up_proj.", ".mlp.c_fc_1."),
    (".mlp.down_proj.", ".mlp.c_proj."),
]


def exaone_hub_spelling(d: Path) -> None:
    """Rewrite an `exaone` fixture's config.json and model.safetensors in the hub's names."""
    from safetensors.torch import load_file, save_file

    cfg = json.loads((d / "config.json").read_text())
    cfg = {EXAONE_CONFIG_NAMES.get(k, k): v for k, v in cfg.items()}
    (d / "config.json").write_text(json.dumps(dict(sorted(cfg.items())), indent=2) + "\n")
    path = d / "model.safetensors"
    out = {}
    for k, v in load_file(path).items():
        for new, old in EXAONE_MODULE_NAMES:
            k = k.replace(new, old) if new.startswith(".") or k.startswith(new) else k
        out[k] = v
    assert any(k.startswith("transformer.h.0.attn.attention.q_proj") for k in out), list(out)
    save_file(out, path, metadata={"format": "pt"})


FIXTURES = {
    # name: (seed, stored dtype, config spelling, max_shard_size)
    "llama": (1000, "f32", "v5", None),
    "llama-bf16-sharded": (2000, "bf16", "v5", "64KB"),
    "qwen2": (3000, "f32", "v5", None),
    "mistral": (4000, "f32", "v4", None),
    "gemma": (5000, "f32", "v5", None),
    "gemma2": (6000, "f32", "v4", None),
    "gemma3_text": (7000, "f32", "v5", None),
    "gemma4_text": (7540, "f32", "v5", None),
    "gemma4_unified_text": (7590, "f32", "v5", None),
    "gemma3n_text": (7640, "f32", "v5", None),
    "gpt2": (5000, "f32", "v5", None),
    "gpt-sw3": (5110, "f32", "v5", None),
    "gpt_bigcode": (5010, "f32", "v5", None),
    "openai-gpt": (5020, "f32", "v5", None),
    "gptj": (5030, "f32", "v5", None),
    "codegen": (5040, "f32", "v5", None),
    "gpt_neo": (5070, "f32", "v5", None),
    "opt": (5050, "f32", "v5", None),
    "xglm": (5080, "f32", "v5", None),
    "ctrl": (5090, "f32", "v5", None),
    "biogpt": (5100, "f32", "v5", None),
    "gpt_neox_japanese": (5120, "f32", "v5", None),
    "opt-350m": (5060, "f32", "v5", None),
    "phi": (6000, "f32", "v4", None),
    "qwen3": (5000, "f32", "v5", None),
    "lfm2": (6500, "f32", "v5", None),
    "mamba2": (6600, "f32", "v5", None),
    "lfm2_moe": (6700, "f32", "v5", None),
    "bamba": (6700, "f32", "v5", None),
    "granitemoehybrid": (6800, "f32", "v5", None),
    "granitemoehybrid-attn": (6900, "f32", "v5", None),
    "mamba": (6700, "f32", "v5", None),
    "falcon_mamba": (6800, "f32", "v5", None),
    "nemotron_h": (6900, "f32", "v5", None),
    "jamba": (7200, "f32", "v5", None),
    "falcon_h1": (7300, "f32", "v5", None),
    "zamba2": (7600, "f32", "v5", None),
    "qwen3_next": (6900, "f32", "v5", None),
    "qwen3_5_text": (7000, "f32", "v5", None),
    "qwen3_5_moe_text": (7100, "f32", "v5", None),
    "qwen3_5": (7000, "f32", "v5", None),
    "qwen3_5_moe": (7100, "f32", "v5", None),
    "smollm3": (6000, "f32", "v4", None),
    "granite": (7000, "f32", "v5", None),
    "olmo2": (8000, "f32", "v5", None),
    "phi3": (9000, "f32", "v4", None),
    "qwen2-yarn": (3100, "f32", "v5", None),
    "ministral": (4100, "f32", "v5", None),
    "helium": (4200, "f32", "v5", None),
    "starcoder2": (4300, "f32", "v5", None),
    "gemma3": (7100, "f32", "v5", None),
    "mistral3": (4400, "f32", "v5", None),
    "mixtral": (4400, "f32", "v5", None),
    "qwen2_moe": (4500, "f32", "v5", None),
    "qwen3_moe": (4600, "f32", "v5", None),
    "stablelm": (4400, "f32", "v5", None),
    "stablelm-parallel": (4410, "f32", "v5", None),
    "gpt_neox": (4500, "f32", "v4", None),
    "gpt_neox-sequential": (4510, "f32", "v4", None),
    "olmo": (4600, "f32", "v5", None),
    "nemotron": (4700, "f32", "v4", None),
    "cohere": (4800, "f32", "v5", None),
    "glm": (4920, "f32", "v5", None),
    "glm4": (4930, "f32", "v5", None),
    "olmo3": (4940, "f32", "v5", None),
    "exaone4": (4950, "f32", "v4", None),
    "exaone_moe": (5130, "f32", "v5", None),
    "cohere2": (4960, "f32", "v5", None),
    "cohere2_moe": (5140, "f32", "v5", None),
    "cohere_compass_text": (5150, "f32", "v5", None),
    "ernie4_5": (4970, "f32", "v4", None),
    "apertus": (4980, "f32", "v5", None),
    "apertus1p5_text": (4990, "f32", "v5", None),
    "arcee": (6100, "f32", "v5", None),
    "seed_oss": (6200, "f32", "v4", None),
    "internlm3": (6300, "f32", "v5", None),
    "exaone": (6400, "f32", "v4", None),
    "hunyuan_v1_dense": (6500, "f32", "v5", None),
    "cwm": (6600, "f32", "v5", None),
    "vaultgemma": (6700, "f32", "v5", None),
    "ministral3": (6800, "f32", "v5", None),
    "granite_swa": (6900, "f32", "v5", None),
    "granitemoeshared": (7200, "f32", "v5", None),
    "granitemoe_swa": (7300, "f32", "v5", None),
    "flex_olmo": (7400, "f32", "v5", None),
    "jais2": (7500, "f32", "v4", None),
    "nanochat": (7600, "f32", "v5", None),
    "bitnet": (7700, "f32", "v5", None),
    "iquestcoder": (7800, "f32", "v4", None),
    "hyperclovax": (7900, "f32", "v5", None),
    "mellum": (8100, "f32", "v5", None),
    "diffllama": (8200, "f32", "v5", None),
    "solar_open": (8300, "f32", "v5", None),
    "doge": (8400, "f32", "v5", None),
    "jetmoe": (8500, "f32", "v5", None),
    "modernbert-decoder": (8600, "f32", "v5", None),
    "olmoe": (5100, "f32", "v5", None),
    "granitemoe": (5200, "f32", "v5", None),
    "phimoe": (5300, "f32", "v5", None),
    "gpt_oss": (5300, "f32", "v5", None),
    "llama-dynamic": (5400, "f32", "v5", None),
    "bloom": (5500, "f32", "v5", None),
    "mpt": (5600, "f32", "v5", None),
    "falcon": (5700, "f32", "v5", None),
    "falcon-alibi": (5800, "f32", "v5", None),
    "falcon-mq": (5900, "f32", "v5", None),
    "persimmon": (6000, "f32", "v4", None),
    "ernie4_5_moe": (6100, "f32", "v5", None),
    "minimax_m2": (6200, "f32", "v5", None),
    "hunyuan_v1_moe": (6300, "f32", "v5", None),
    **{name: (5500 + 10 * i, "f32", "v5", None) for i, name in enumerate(BERT_LM)},
    **{name: (5700 + 10 * i, "f32", "v5", None) for i, name in enumerate(BART_LM)},
    "deepseek_v3": (5500, "f32", "v5", None),
    "deepseek_v2": (5600, "f32", "v5", None),
    "minicpm3": (5700, "f32", "v4", None),
    "youtu": (5750, "f32", "v5", None),
    "glm4_moe": (5800, "f32", "v5", None),
    "glm4_moe_lite": (5900, "f32", "v5", None),
    "dots1": (6100, "f32", "v5", None),
    "sarvam_mla": (6200, "f32", "v4", None),
    "sarvam_moe": (6250, "f32", "v4", None),
    "param2moe": (6260, "f32", "v5", None),
    "hy_v3": (6270, "f32", "v5", None),
    "minicpm5_moe": (6280, "f32", "v5", None),
    "axk1": (6290, "f32", "v5", None),
    "longcat_flash": (6295, "f32", "v5", None),
    "deepseek_v32": (6296, "f32", "v5", None),
    "glm_moe_dsa": (6297, "f32", "v5", None),
    "axk2": (6298, "f32", "v5", None),
    "dbrx": (6400, "f32", "v5", None),
    "llama4_text": (8400, "f32", "v5", None),
    "afmoe": (8500, "f32", "v5", None),
    "aria_text": (8700, "f32", "v5", None),
    "kolibri1": (8800, "f32", "v5", None),
    "flint": (8900, "f32", "v5", None),
    "laguna": (9100, "f32", "v5", None),
    "beam": (9200, "f32", "v5", None),
    "mimo_v2_flash": (9300, "f32", "v5", None),
    "ergo": (9400, "f32", "v5", None),
    "emu3": (9500, "f32", "v5", None),
    "mllama": (9600, "f32", "v5", None),
    "recurrent_gemma": (9700, "f32", "v5", None),
}


def make_fixture(name: str, out_root: Path, tok: PreTrainedTokenizerFast) -> None:
    base_seed, dtype, spelling, shard = FIXTURES[name]
    ids = special_ids(tok)
    vocab = len(tok)
    input_ids = tok(PROMPT, add_special_tokens=False)["input_ids"]
    assert 8 <= len(input_ids) <= 12, (len(input_ids), input_ids)
    eos_ids = {ids["eos_token_id"], ids["pad_token_id"], ids["bos_token_id"]}

    for seed in range(base_seed, base_seed + 200):
        cls, cfg = make_config(name, vocab, ids)
        torch.manual_seed(seed)
        model = cls._from_config(cfg, attn_implementation="eager", dtype=torch.float32)
        model.eval()
        (perturb_bert_lm if name in BERT_LM else perturb)(model, seed)
        if name in ZERO_PAD_ROW:
            with torch.no_grad():
                model.get_input_embeddings().weight[ids["pad_token_id"]].zero_()
        if dtype == "bf16":
            # Round the weights to bf16 (what gets stored), keep computing in f32.
            # Only parameters: buffers such as the rotary inv_freq stay f32.
            with torch.no_grad():
                for p in model.parameters():
                    p.copy_(p.to(torch.bfloat16).to(torch.float32))
        if name in CACHED_GREEDY:
            res = cached_greedy_reference(model, input_ids, eos_ids, ids["pad_token_id"])
            if res is None:
                continue
            logits, greedy, gap, step_logits = res
        else:
            res = greedy_reference(model, input_ids, eos_ids)
            if res is None:
                continue
            logits, greedy, gap = res
        # gap at the prompt's last position is part of the greedy gaps already.
        if gap > MIN_GAP:
            break
    else:
        raise RuntimeError(f"{name}: no seed with top-2 gap > {MIN_GAP}")

    # Cross-check against transformers' own generate (KV cache path).
    if name in CACHED_GREEDY:
        fresh_rope(model)
    extra = {}
    if hasattr(getattr(model.base_model, "embeddings", None), "create_position_ids_from_input_ids"):
        # RoBERTa-style positions: a forward without position_ids numbers them after the padding
        # token, generate (which passes its own, from 0) would not; give it the forward's.
        extra["position_ids"] = torch.arange(len(input_ids))[None] + ids["pad_token_id"] + 1
    gen = model.generate(
        torch.tensor([input_ids]),
        attention_mask=torch.ones(1, len(input_ids), dtype=torch.long),
        do_sample=False,
        max_new_tokens=N_NEW,
        min_new_tokens=N_NEW,
        pad_token_id=ids["pad_token_id"],
        **extra,
    )[0, len(input_ids):].tolist()
    assert gen == greedy, (name, gen, greedy)
    if name in TEXT_MODELS:
        check_text_model(name, model, input_ids, logits)

    d = out_root / name
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    model.generation_config = GenerationConfig(**ids)
    save_kwargs = {}
    if shard:
        save_kwargs["max_shard_size"] = shard
    if dtype == "bf16":
        model = model.to(torch.bfloat16)
    model.save_pretrained(d, **save_kwargs)
    tok.save_pretrained(d)
    if name in RENAMED_TYPES:
        path = d / "config.json"
        cfg = json.loads(path.read_text())
        cfg["model_type"] = RENAMED_TYPES[name]
        path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
        # transformers reads the renamed config back into the same model.
        reloaded = transformers.AutoModelForCausalLM.from_pretrained(d, attn_implementation="eager", dtype=torch.float32)
        assert reloaded.config.model_type == RENAMED_TYPES[name], reloaded.config.model_type
        with torch.no_grad():
            again = reloaded.eval()(torch.tensor([input_ids])).logits[0].float()
        assert torch.equal(again, logits), (name, float((again - logits).abs().max()))
    if spelling == "v4":
        rewrite_config_v4(d / "config.json")
        if name == "exaone":
            exaone_hub_spelling(d)
        # transformers reads the rewritten config back into the same model.
        # (EXAONE through the Auto class: its config class and renamed modules are keyed by
        # model_type.)
        loader = transformers.AutoModelForCausalLM if name == "exaone" else cls
        reloaded = loader.from_pretrained(d, attn_implementation="eager", dtype=torch.float32).eval()
        with torch.no_grad():
            again = reloaded(torch.tensor([input_ids])).logits[0].float()
        assert torch.equal(again, logits), (name, float((again - logits).abs().max()))

    ref = {
        "prompt": PROMPT,
        "input_ids": input_ids,
        "logits": [[rnd(v) for v in row] for row in logits.tolist()],
        "greedy_tokens": greedy,
        "dtype": dtype,
        "seed": seed,
        "min_top2_gap": rnd(gap),
        "vocab_size": vocab,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
    }
    if name == "phi3":
        # A prompt that fits the original context: transformers uses the short factors.
        short_ids = input_ids[:PHI3_ORIGINAL_MAX]
        assert len(input_ids) > PHI3_ORIGINAL_MAX
        with torch.no_grad():
            short_logits = model.float()(torch.tensor([short_ids])).logits[0]
        ref["short_prompt"] = {
            "input_ids": short_ids,
            "logits": [[rnd(v) for v in row] for row in short_logits.tolist()],
        }
    if name == "llama-dynamic":
        n = DYNAMIC_ORIGINAL_MAX
        assert len(input_ids) < n < len(input_ids) + len(greedy)
        # Every greedy step's logits, as the KV-cache generate computed them.
        ref["generation_logits"] = [[rnd(v) for v in row] for row in step_logits.tolist()]
        # One forward over 2 x the original context (base raised for the 64-token pass).
        long_ids = tok(TRAIN_TEXT, add_special_tokens=False)["input_ids"][: 2 * n]
        assert len(long_ids) == 2 * n
        fresh_rope(model)
        with torch.no_grad():
            long_logits = model(torch.tensor([long_ids])).logits[0]
        ref["long_prompt"] = {
            "input_ids": long_ids,
            "logits": [[rnd(v) for v in row] for row in long_logits.tolist()],
        }
        # The cached steps past the original context differ from one forward over the same
        # tokens (which rotates every key with the base of the whole length).
        fresh_rope(model)
        with torch.no_grad():
            full = model(torch.tensor([input_ids + greedy])).logits[0, len(input_ids) - 1 : -1]
        past = slice(n - len(input_ids), None)
        apart = float((full[past] - step_logits[past]).abs().max())
        assert apart > 1e-2, apart
        print(f"{name}: cached steps past {n} tokens differ from a full forward by {apart:.3g}")
    if name == "qwen2-yarn":
        # The prompt and its greedy continuation in one pass: positions beyond the original
        # context.
        long_ids = input_ids + greedy
        assert len(long_ids) > YARN_ORIGINAL_MAX
        with torch.no_grad():
            long_logits = model(torch.tensor([long_ids])).logits[0]
        ref["long_prompt"] = {
            "input_ids": long_ids,
            "logits": [[rnd(v) for v in row] for row in long_logits.tolist()],
        }
    if name in SPARSE_ATTENTION:
        indexers = [l.self_attn.indexer for l in model.model.layers if l.self_attn.indexer is not None]
        topk = model.config.index_topk
        assert topk < len(input_ids), (topk, len(input_ids))
        for ix in indexers:
            ix.index_topk = 10**6
        with torch.no_grad():
            dense = model(torch.tensor([input_ids])).logits[0].float()
        for ix in indexers:
            ix.index_topk = topk
        effect = float((dense - logits).abs().max())
        assert effect > SPARSE_MIN_EFFECT, (name, effect)
        print(f"{name}: keeping every key moves the logits by {effect:.3g}")
    if name in HYBRID:
        ref["task"] = "hybrid-text-generation"
        ref["decode_steps"] = hybrid_decode_steps(model, input_ids, greedy)
    if model.config.model_type in ("qwen3_5_text", "qwen3_5_moe_text", "qwen3_5", "qwen3_5_moe"):
        ref["mrope"] = mrope_case(model, input_ids)
    (d / "reference.json").write_text(json.dumps(ref, separators=(",", ":")) + "\n")

    if shard:
        n = len(list(d.glob("model-*-of-*.safetensors")))
        assert n >= 3 and (d / "model.safetensors.index.json").exists(), n
    size = sum(f.stat().st_size for f in d.iterdir())
    assert size < 1_000_000, (name, size)
    print(f"{name}: seed={seed} min_gap={gap:.4g} tokens={len(input_ids)} size={size}B")


# --------------------------------------------------------------------------
# encoders (feature extraction)
# --------------------------------------------------------------------------
# reference.json of an encoder fixture:
#     {
#       "task": "feature-extraction",     # decoder fixtures have no "task"
#       "prompt": str, "dtype": "f32", "seed": int, "hidden_size": int,
#       "cases": [{                        # every case: one forward in f32 (eager attention)
#           "name": str,                   # single | right_padded | left_padded
#           "input_ids", "attention_mask": [[int]*S]*B,
#           "token_type_ids": [[int]*S]*B, # only when type_vocab_size > 1
#           "last_hidden_state": [[[float]*H]*S]*B   # padded positions included; compare
#       }],                                          # only where attention_mask is 1
#       "transformers_version": str, "torch_version": str
#     }
ENC_DIMS = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4)
# RoBERTa's real vocabulary starts <s>, <pad>, </s>: pad id 1, so positions start at 2.
ROBERTA_SPECIALS = [BOS, PAD, EOS]
N_PAD = 3

ENCODER_FIXTURES = {
    # name: (seed, model class, config, checkpoint names)
    "bert": (
        5000,
        BertModel,
        lambda vocab: BertConfig(
            **ENC_DIMS, vocab_size=vocab, max_position_embeddings=128, type_vocab_size=2,
            layer_norm_eps=1e-12, pad_token_id=0,
        ),
        "legacy",  # bert.-prefixed, LayerNorm gamma/beta (bert-base-uncased style)
    ),
    "roberta": (
        6000,
        RobertaModel,
        lambda vocab: RobertaConfig(
            **ENC_DIMS, vocab_size=vocab, max_position_embeddings=130, type_vocab_size=1,
            layer_norm_eps=1e-5, pad_token_id=1, bos_token_id=0, eos_token_id=2,
        ),
        "plain",  # as RobertaModel.save_pretrained writes them
    ),
}


def perturb_encoder(model, seed: int) -> None:
    """Larger random weights than the default init; LayerNorm weights near 1."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            r = torch.randn(p.shape, generator=g, dtype=torch.float32)
            if "LayerNorm.weight" in name:
                v = 1.0 + 0.2 * r
            elif name.endswith(".bias"):
                v = 0.1 * r
            elif "embeddings" in name:
                v = 0.5 * r
            else:
                v = 0.15 * r
            p.copy_(v)


def legacy_names(path: Path, prefix: str) -> None:
    """Rewrite model.safetensors with old checkpoint names: `prefix.` and gamma/beta."""
    from safetensors.torch import load_file, save_file

    tensors = load_file(path)
    out = {}
    for k, v in tensors.items():
        if "LayerNorm." in k:
            k = k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta")
        out[f"{prefix}.{k}"] = v
    save_file(out, path, metadata={"format": "pt"})


def encoder_cases(input_ids: list[int], pad: int, token_types: bool) -> list[dict]:
    """A batch-1 unpadded case and two padded batches of 2 (the second row N_PAD shorter)."""
    n = len(input_ids)
    short = input_ids[: n - N_PAD]
    segments = [0] * (n // 2) + [1] * (n - n // 2)  # two "sentences"
    cases = [dict(name="single", rows=[input_ids], masks=[[1] * n], types=[segments])]
    cases.append(dict(
        name="right_padded",
        rows=[input_ids, short + [pad] * N_PAD],
        masks=[[1] * n, [1] * len(short) + [0] * N_PAD],
        types=[segments, segments[: len(short)] + [0] * N_PAD],
    ))
    cases.append(dict(
        name="left_padded",
        rows=[input_ids, [pad] * N_PAD + short],
        masks=[[1] * n, [0] * N_PAD + [1] * len(short)],
        types=[segments, [0] * N_PAD + segments[: len(short)]],
    ))
    out = []
    for c in cases:
        case = {"name": c["name"], "input_ids": c["rows"], "attention_mask": c["masks"]}
        if token_types:
            case["token_type_ids"] = c["types"]
        out.append(case)
    return out


@torch.no_grad()
def make_encoder_fixture(name: str, out_root: Path) -> None:
    seed, cls, make_cfg, names = ENCODER_FIXTURES[name]
    tok = build_tokenizer(ROBERTA_SPECIALS if name == "roberta" else SPECIALS)
    cfg = make_cfg(len(tok))
    assert tok.pad_token_id == cfg.pad_token_id, (tok.pad_token_id, cfg.pad_token_id)
    torch.manual_seed(seed)
    model = cls._from_config(cfg, attn_implementation="eager", dtype=torch.float32)
    model.eval()
    perturb_encoder(model, seed)
    input_ids = tok(PROMPT, add_special_tokens=False)["input_ids"]
    cases = encoder_cases(input_ids, cfg.pad_token_id, cfg.type_vocab_size > 1)
    for case in cases:
        kwargs = {k: torch.tensor(case[k]) for k in ("input_ids", "attention_mask", "token_type_ids") if k in case}
        hidden = model(**kwargs).last_hidden_state.float()
        case["last_hidden_state"] = [[[rnd(v) for v in tokv] for tokv in row] for row in hidden.tolist()]
    # The unpadded row of each padded batch equals the batch-1 forward (padding is masked).
    single = torch.tensor(cases[0]["last_hidden_state"][0])
    for case in cases[1:]:
        assert torch.allclose(torch.tensor(case["last_hidden_state"][0]), single, atol=1e-5), case["name"]

    d = out_root / name
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    model.save_pretrained(d)
    tok.save_pretrained(d)
    if names == "legacy":
        legacy_names(d / "model.safetensors", name)
    ref = {
        "task": "feature-extraction",
        "prompt": PROMPT,
        "dtype": "f32",
        "seed": seed,
        "hidden_size": cfg.hidden_size,
        "cases": cases,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
    }
    if name in HYBRID:
        ref["task"] = "hybrid-text-generation"
        ref["decode_steps"] = hybrid_decode_steps(model, input_ids, greedy)
    (d / "reference.json").write_text(json.dumps(ref, separators=(",", ":")) + "\n")
    size = sum(f.stat().st_size for f in d.iterdir())
    assert size < 1_000_000, (name, size)
    print(f"{name}: seed={seed} tokens={len(input_ids)} size={size}B")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=REPO / "tests" / "fixtures")
    ap.add_argument("--only", nargs="*", choices=sorted([*FIXTURES, *ENCODER_FIXTURES]))
    args = ap.parse_args()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    tok = build_tokenizer()
    for name in args.only or [*FIXTURES, *ENCODER_FIXTURES]:
        if name in ENCODER_FIXTURES:
            make_encoder_fixture(name, args.out)
        else:
            make_fixture(name, args.out, tok)
    return 0


if __name__ == "__main__":
    sys.exit(main())
