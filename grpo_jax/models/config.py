"""ModelConfig: the shape and numerics of a Llama / Qwen2 / Qwen3 decoder.

`ModelConfig.from_hf` reads a Hugging Face ``config.json`` dict written by
transformers 4.x (top-level ``rope_theta`` / ``rope_scaling``, ``torch_dtype``)
or 5.x (``rope_parameters``, ``dtype``).
"""

import dataclasses
from typing import Any, Mapping

import jax.numpy as jnp

SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "qwen3")
# RoPE variants we implement; anything else must fail loudly, since a wrong
# frequency schedule gives plausible-looking but wrong logits.
SUPPORTED_ROPE_TYPES = ("default",)
DTYPES = ("float32", "bfloat16", "float16")


def dtype_name(dtype) -> str:
  """'float32' / 'bfloat16' / 'float16' from a string, numpy or jnp dtype."""
  if dtype is None:
    raise ValueError("dtype must not be None.")
  name = jnp.dtype(dtype).name
  if name not in DTYPES:
    raise ValueError(f"dtype={dtype!r} is unsupported; choose one of {DTYPES}.")
  return name


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """Decoder hyperparameters. Hashable: usable as a jit static argument.

  `dtype` is the compute dtype (activations, matmuls, the KV cache);
  `param_dtype` the dtype params are stored in. Both are names ('float32',
  'bfloat16'): dtype bfloat16 over float32 params is mixed precision.
  """
  model_type: str
  vocab_size: int
  hidden_size: int
  intermediate_size: int
  num_layers: int
  num_heads: int
  num_kv_heads: int
  head_dim: int
  rope_theta: float = 10000.0
  rms_norm_eps: float = 1e-6
  tie_word_embeddings: bool = False
  qkv_bias: bool = False
  qk_norm: bool = False
  max_position_embeddings: int = 4096
  dtype: str = "float32"
  param_dtype: str = "float32"
  # alpha / rank of LoRA adapters, where the params carry them (`lora`).
  lora_scale: float = 1.0
  # Gradient checkpointing: the backward pass keeps each layer's input
  # alone and recomputes the rest, for one more forward pass. Only
  # gradients see it; values are the same.
  remat: bool = False

  def __post_init__(self):
    if self.model_type not in SUPPORTED_MODEL_TYPES:
      raise ValueError(
          f"model_type={self.model_type!r} is unsupported; supported types: "
          f"{', '.join(SUPPORTED_MODEL_TYPES)}.")
    if self.num_heads % self.num_kv_heads:
      raise ValueError(
          f"num_heads={self.num_heads} must be a multiple of "
          f"num_kv_heads={self.num_kv_heads}.")
    if self.head_dim % 2:
      raise ValueError(f"head_dim={self.head_dim} must be even for RoPE.")
    # Normalise dtypes to names so equal configs hash equally.
    object.__setattr__(self, "dtype", dtype_name(self.dtype))
    object.__setattr__(self, "param_dtype", dtype_name(self.param_dtype))

  @property
  def compute_dtype(self):
    return jnp.dtype(self.dtype)

  @property
  def params_dtype(self):
    return jnp.dtype(self.param_dtype)

  def replace(self, **changes) -> "ModelConfig":
    return dataclasses.replace(self, **changes)

  def to_dict(self) -> dict:
    return dataclasses.asdict(self)

  @classmethod
  def from_hf(cls, config: Mapping[str, Any], *, dtype="float32",
              param_dtype=None) -> "ModelConfig":
    """Builds a config from a Hugging Face config.json dict (4.x or 5.x keys).

    Args:
      config: the parsed config.json.
      dtype: compute dtype.
      param_dtype: storage dtype of params; None means the same as `dtype`.
        The checkpoint's own ``torch_dtype`` / ``dtype`` is not used: weights
        are cast on load.
    """
    model_type = config.get("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
      raise ValueError(
          f"config.json model_type={model_type!r} is unsupported; supported "
          f"types: {', '.join(SUPPORTED_MODEL_TYPES)}.")
    hidden = config["hidden_size"]
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or hidden // heads

    rope_theta = _rope_theta(config)
    attention_bias = bool(config.get("attention_bias") or False)
    if model_type in ("llama", "qwen3") and attention_bias:
      # These families then also put a bias on o_proj, which we do not carry.
      raise ValueError(
          f"{model_type} checkpoints with attention_bias=True are unsupported.")
    if config.get("mlp_bias"):
      raise ValueError("checkpoints with mlp_bias=True are unsupported.")
    if config.get("use_sliding_window"):
      raise ValueError(
          "checkpoints with use_sliding_window=True are unsupported.")
    layer_types = config.get("layer_types")
    if layer_types and any(t != "full_attention" for t in layer_types):
      raise ValueError(
          f"layer_types={sorted(set(layer_types))} is unsupported; only "
          "'full_attention' layers are implemented.")
    return cls(
        model_type=model_type,
        vocab_size=config["vocab_size"],
        hidden_size=hidden,
        intermediate_size=config["intermediate_size"],
        num_layers=config["num_hidden_layers"],
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        rope_theta=float(rope_theta),
        rms_norm_eps=float(config.get("rms_norm_eps", 1e-6)),
        tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
        qkv_bias=(model_type == "qwen2") or attention_bias,
        qk_norm=(model_type == "qwen3"),
        max_position_embeddings=int(
            config.get("max_position_embeddings") or 4096),
        dtype=dtype,
        param_dtype=dtype if param_dtype is None else param_dtype,
    )


def _rope_theta(config: Mapping[str, Any]) -> float:
  """RoPE base from 5.x ``rope_parameters`` or 4.x top-level keys.

  Raises ValueError for a scaling type other than plain RoPE.
  """
  rope_parameters = config.get("rope_parameters")
  rope_scaling = config.get("rope_scaling")
  theta = config.get("rope_theta")
  for params in (rope_parameters, rope_scaling):
    if not params:
      continue
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type not in SUPPORTED_ROPE_TYPES:
      raise ValueError(
          f"RoPE scaling type {rope_type!r} is unsupported; supported: "
          f"{', '.join(SUPPORTED_ROPE_TYPES)} (rope_scaling None).")
    if params.get("rope_theta") is not None:
      theta = params["rope_theta"]
  if theta is None:
    theta = 10000.0  # transformers' default for all three families.
  return float(theta)
