"""Llama / Qwen2 / Qwen3 decoders: config, Flax model, KV cache, loading."""

from grpo_jax.models.config import SUPPORTED_MODEL_TYPES, ModelConfig
from grpo_jax.models.transformer import (
    KVCache,
    causal_attention_mask,
    forward,
    forward_shared_prompts,
    init_cache,
    init_params,
    logits,
    positions_from_mask,
    unembedding,
)
from grpo_jax.models.loading import (
    EMBEDDED_MODELS,
    eos_ids,
    load,
    load_gguf,
    load_hf_checkpoint,
    load_tokenizer,
)
from grpo_jax.models.export import save_hf_checkpoint
from grpo_jax.models.presets import (built_in_config, eos_and_pad, load_model,
                                     tiny_model_config)

# The public API: what the imports above re-export.
__all__ = [
    "built_in_config", "causal_attention_mask", "EMBEDDED_MODELS",
    "eos_and_pad", "eos_ids", "forward", "forward_shared_prompts",
    "init_cache", "init_params",
    "KVCache", "load", "load_gguf", "load_hf_checkpoint", "load_model",
    "load_tokenizer", "logits", "ModelConfig", "positions_from_mask",
    "save_hf_checkpoint", "SUPPORTED_MODEL_TYPES", "tiny_model_config",
    "unembedding",
]
