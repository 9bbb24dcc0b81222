"""A Llama / Qwen2 / Qwen3 decoder in Flax linen, scanned over layers.

    h_0 = embed[tokens]
    h_{l+1} = h_l' + SwiGLU(RMSNorm(h_l')),  h_l' = h_l + Attn(RMSNorm(h_l))
    hidden = RMSNorm(h_layers)                (the model returns this, not logits)

Attention is grouped-query (H query heads share K key/value heads) with rotary
position embeddings (RoPE, arXiv:2104.09864) in the Hugging Face "rotate half"
layout; Qwen2 adds q/k/v biases, Qwen3 an RMSNorm over each head's q and k
before RoPE. Softmax runs in float32.

Params tree (a plain nested dict; Lyr = num_layers, F = intermediate size):

    params["embed"]                      [V, D]
    params["layers"]["attn_norm"]        [Lyr, D]
    params["layers"]["attn"]["q"]        [Lyr, D, H*hd]
    params["layers"]["attn"]["k"]        [Lyr, D, K*hd]
    params["layers"]["attn"]["v"]        [Lyr, D, K*hd]
    params["layers"]["attn"]["o"]        [Lyr, H*hd, D]
    params["layers"]["attn"]["q_bias"]   [Lyr, H*hd]   (qkv_bias only)
    params["layers"]["attn"]["k_bias"]   [Lyr, K*hd]   (qkv_bias only)
    params["layers"]["attn"]["v_bias"]   [Lyr, K*hd]   (qkv_bias only)
    params["layers"]["attn"]["q_norm"]   [Lyr, hd]     (qk_norm only)
    params["layers"]["attn"]["k_norm"]   [Lyr, hd]     (qk_norm only)
    params["layers"]["mlp_norm"]         [Lyr, D]
    params["layers"]["mlp"]["gate"]      [Lyr, D, F]
    params["layers"]["mlp"]["up"]        [Lyr, D, F]
    params["layers"]["mlp"]["down"]      [Lyr, F, D]
    params["final_norm"]                 [D]
    params["lm_head"]                    [D, V]        (untied only)

Matrices are stored [in, out] (Hugging Face Linear weights transposed).

KV cache: `KVCache(k, v)`, each [Lyr, B, L, K, hd]. A forward with a cache
writes the S new keys/values of every row at slots [cache_index,
cache_index + S) and lets queries attend over all L slots through
`attention_mask` [B, S, L].
"""

from typing import NamedTuple, Optional

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp

from grpo_jax.runtime import sharding
from grpo_jax.models import lora
from grpo_jax.models.config import ModelConfig

_INIT_STD = 0.02


class KVCache(NamedTuple):
  """Stacked keys and values, each [Lyr, B, L, K, hd]."""
  k: jnp.ndarray
  v: jnp.ndarray


def init_cache(config: ModelConfig, batch: int, length: int,
               dtype=None) -> KVCache:
  """An all-zero cache of `length` slots (dtype defaults to config.dtype)."""
  dtype = config.compute_dtype if dtype is None else jnp.dtype(dtype)
  shape = (config.num_layers, batch, length, config.num_kv_heads,
           config.head_dim)
  return KVCache(k=jnp.zeros(shape, dtype), v=jnp.zeros(shape, dtype))


def causal_attention_mask(input_mask: jnp.ndarray) -> jnp.ndarray:
  """[B, S] real-token mask -> [B, S, S] mask: key j <= query i and j is real.

  Padding queries may end up with no visible key; attention then returns
  zeros for them (never NaN).
  """
  if input_mask.ndim != 2:
    raise ValueError(
        f"input_mask must be [B, S] (rank 2); got shape {input_mask.shape}.")
  s = input_mask.shape[1]
  causal = jnp.tril(jnp.ones((s, s), dtype=bool))
  return causal[None, :, :] & input_mask.astype(bool)[:, None, :]


def positions_from_mask(input_mask: jnp.ndarray) -> jnp.ndarray:
  """[B, S] real-token mask -> [B, S] int32 positions, 0 at the first real token.

  positions = max(cumsum(mask) - 1, 0), so left padding sits at position 0.
  """
  if input_mask.ndim != 2:
    raise ValueError(
        f"input_mask must be [B, S] (rank 2); got shape {input_mask.shape}.")
  positions = jnp.cumsum(input_mask.astype(jnp.int32), axis=-1) - 1
  return jnp.maximum(positions, 0).astype(jnp.int32)


def embed_tokens(table, tokens, dtype):
  """[V, D] table, [B, S] ids -> [B, S, D] rows of the table in `dtype`.

  Under a mesh the whole table is gathered for the lookup (FSDP gathers a
  weight where it is used): a lookup into a table split over D would give
  activations split over D, which XLA can turn into split rows only by
  replicating them.
  """
  table = sharding.constrain(table, sharding.WHOLE)
  return sharding.constrain(jnp.take(table, tokens, axis=0).astype(dtype),
                            sharding.RESIDUAL)


def rms_norm(x, weight, eps, axis=-1):
  """x / sqrt(mean(x^2) + eps) * weight over `axis` (the feature axis; the
  decode step's feature-major arrays use 0 or 1), the statistic in float32."""
  x32 = x.astype(jnp.float32)
  normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=axis, keepdims=True)
                               + eps)
  shape = [1] * x.ndim
  shape[axis] = weight.shape[0]
  return normed.astype(x.dtype) * weight.reshape(shape).astype(x.dtype)


def rope_cos_sin(positions, head_dim, theta):
  """cos, sin tables [B, S, hd] for integer positions [B, S], in float32.

  inv_freq_i = theta^(-2i/hd); the half-split ("rotate half") layout repeats
  the hd/2 frequencies twice.
  """
  inv_freq = 1.0 / (theta ** (jnp.arange(0, head_dim, 2, dtype=jnp.float32)
                              / head_dim))
  angles = positions.astype(jnp.float32)[..., None] * inv_freq[None, None, :]
  angles = jnp.concatenate([angles, angles], axis=-1)
  return jnp.cos(angles), jnp.sin(angles)


def apply_rope(x, cos, sin):
  """Rotates x [B, S, heads, hd] by position: x*cos + rotate_half(x)*sin."""
  half = x.shape[-1] // 2
  rotated = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
  cos = cos[:, :, None, :].astype(x.dtype)
  sin = sin[:, :, None, :].astype(x.dtype)
  return x * cos + rotated * sin


@jax.custom_vjp
def masked_softmax(scores, mask):
  """Softmax over the last axis where `mask`; rows with no key give all zeros.

  Masked scores are -inf; the row max is replaced by 0 when the whole row is
  masked so that exp never sees inf - inf. The gradient is written out,
  ``p * (g - sum(g * p))``, so that the backward pass keeps the
  probabilities alone (autodiff's kept the exponentials as well: 71 MB of
  a 1 x 8 SmolLM2 update); masked keys get 0, as they do through -inf.
  Reverse mode only (`jax.grad`, `jax.vjp`): a custom VJP has no forward
  derivative.
  """
  scores = jnp.where(mask, scores, -jnp.inf)
  row_max = jnp.max(scores, axis=-1, keepdims=True)
  row_max = jnp.where(jnp.isfinite(row_max), row_max, 0.0)
  unnormalised = jnp.exp(scores - row_max)
  total = jnp.sum(unnormalised, axis=-1, keepdims=True)
  return unnormalised / jnp.where(total > 0, total, 1.0)


def _masked_softmax_fwd(scores, mask):
  probs = masked_softmax(scores, mask)
  return probs, probs


def _masked_softmax_bwd(probs, d_probs):
  inner = jnp.sum(d_probs * probs, axis=-1, keepdims=True)
  return probs * (d_probs - inner), None


masked_softmax.defvjp(_masked_softmax_fwd, _masked_softmax_bwd)


def _dense_init(key, shape, dtype):
  return _INIT_STD * jax.random.normal(key, shape, dtype)


class Attention(nn.Module):
  """Grouped-query attention with RoPE, optional qkv bias and q/k norm."""
  config: ModelConfig

  @nn.compact
  def __call__(self, x, cos, sin, mask, layer_cache, cache_index):
    cfg = self.config
    dtype, pdtype = cfg.compute_dtype, cfg.params_dtype
    d, h, k, hd = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    b, s, _ = x.shape
    rows = x.reshape(b * s, d)  # one input for q, k, v (`adapted_matmul`)

    def project(name, width):
      w = self.param(name, _dense_init, (d, width), pdtype)
      y = lora.adapted_matmul(self, name, rows, w, dtype, cfg.lora_scale)
      if cfg.qkv_bias:
        bias = self.param(f"{name}_bias", nn.initializers.zeros, (width,),
                          pdtype)
        y = y + bias[None, :].astype(dtype)
      return y

    heads = lambda y, n: sharding.constrain(y.reshape(b, s, n, hd),
                                            sharding.HEADS)
    q = heads(project("q", h * hd), h)
    key = heads(project("k", k * hd), k)
    value = heads(project("v", k * hd), k)
    if cfg.qk_norm:
      q = rms_norm(q, self.param("q_norm", nn.initializers.ones, (hd,), pdtype),
                   cfg.rms_norm_eps)
      key = rms_norm(key, self.param("k_norm", nn.initializers.ones, (hd,),
                                     pdtype), cfg.rms_norm_eps)
    q = apply_rope(q, cos, sin)
    key = apply_rope(key, cos, sin)

    new_cache = None
    if layer_cache is not None:
      cache_k, cache_v = layer_cache
      start = (jnp.int32(0), jnp.asarray(cache_index, jnp.int32), jnp.int32(0),
               jnp.int32(0))
      cache_k = jax.lax.dynamic_update_slice(
          cache_k, key.astype(cache_k.dtype), start)
      cache_v = jax.lax.dynamic_update_slice(
          cache_v, value.astype(cache_v.dtype), start)
      new_cache = sharding.constrain((cache_k, cache_v), sharding.HEADS)
      key, value = cache_k.astype(dtype), cache_v.astype(dtype)

    groups = h // k
    q = q.reshape(b, s, k, groups, hd)
    scores = jnp.einsum("bskgd,blkd->bkgsl", q, key,
                        preferred_element_type=jnp.float32)
    scores = scores * (hd ** -0.5)
    probs = masked_softmax(scores, mask[:, None, None, :, :])
    out = jnp.einsum("bkgsl,blkd->bskgd", probs.astype(dtype), value)
    out = out.reshape(b * s, h * hd)
    w_o = self.param("o", _dense_init, (h * hd, d), pdtype)
    out = lora.adapted_matmul(self, "o", out, w_o, dtype, cfg.lora_scale)
    return out.reshape(b, s, d), new_cache


@jax.custom_vjp
def swiglu(gate, up):
  """``silu(gate) * up``, the SwiGLU product, with its gradient written out.

  On XLA:CPU the 4 x 8 update ran 1.3-1.4x faster with this backward pass
  than with autodiff's through `jax.nn.silu` (in-process A/Bs on
  SmolLM2); the values are the same up to rounding.
  """
  return jax.nn.silu(gate) * up


def _swiglu_fwd(gate, up):
  return swiglu(gate, up), (gate, up)


def _swiglu_bwd(residuals, d_out):
  gate, up = residuals
  sig = jax.nn.sigmoid(gate)
  # silu(g) = g s and silu'(g) = s (1 + g (1 - s)), with s = sigmoid(g).
  return d_out * up * sig * (1 + gate * (1 - sig)), d_out * gate * sig


swiglu.defvjp(_swiglu_fwd, _swiglu_bwd)


class Mlp(nn.Module):
  """SwiGLU: down(silu(x @ gate) * (x @ up))."""
  config: ModelConfig

  @nn.compact
  def __call__(self, x):
    cfg = self.config
    dtype, pdtype = cfg.compute_dtype, cfg.params_dtype
    d, f = cfg.hidden_size, cfg.intermediate_size
    matmul = lambda name, x, shape: lora.adapted_matmul(
        self, name, x, self.param(name, _dense_init, shape, pdtype), dtype,
        cfg.lora_scale)
    rows = x.reshape(-1, d)  # one input for gate and up (`adapted_matmul`)
    hidden = swiglu(matmul("gate", rows, (d, f)), matmul("up", rows, (d, f)))
    hidden = sharding.constrain(hidden.reshape(*x.shape[:-1], f),
                                sharding.MLP_HIDDEN)
    return matmul("down", hidden.reshape(-1, f), (f, d)).reshape(x.shape)


class Block(nn.Module):
  """One pre-norm decoder layer; the scan body."""
  config: ModelConfig

  @nn.compact
  def __call__(self, x, layer_cache, cos, sin, mask, cache_index):
    cfg = self.config
    pdtype = cfg.params_dtype
    # Rows split, D whole: FSDP gathers each weight, never the activations.
    x = sharding.constrain(x, sharding.RESIDUAL)
    attn_norm = self.param("attn_norm", nn.initializers.ones,
                           (cfg.hidden_size,), pdtype)
    mlp_norm = self.param("mlp_norm", nn.initializers.ones,
                          (cfg.hidden_size,), pdtype)
    attn_out, new_cache = Attention(cfg, name="attn")(
        rms_norm(x, attn_norm, cfg.rms_norm_eps), cos, sin, mask, layer_cache,
        cache_index)
    x = x + attn_out
    x = x + Mlp(cfg, name="mlp")(rms_norm(x, mlp_norm, cfg.rms_norm_eps))
    return x, new_cache


class Decoder(nn.Module):
  """Embedding, scanned layers, final norm. Returns hidden states [B, S, D]."""
  config: ModelConfig

  @nn.compact
  def __call__(self, tokens, positions, attention_mask, cache, cache_index):
    cfg = self.config
    dtype, pdtype = cfg.compute_dtype, cfg.params_dtype
    embed = self.param("embed", _dense_init, (cfg.vocab_size, cfg.hidden_size),
                       pdtype)
    if not cfg.tie_word_embeddings:
      self.param("lm_head", _dense_init, (cfg.hidden_size, cfg.vocab_size),
                 pdtype)
    x = embed_tokens(embed, tokens, dtype)
    cos, sin = rope_cos_sin(positions, cfg.head_dim, cfg.rope_theta)

    # prevent_cse=False: the scan already keeps XLA from merging the
    # recomputed forward with the first one.
    block = nn.remat(Block, prevent_cse=False) if cfg.remat else Block
    layers = nn.scan(
        block,
        variable_axes={"params": 0},
        split_rngs={"params": True},
        in_axes=(0, nn.broadcast, nn.broadcast, nn.broadcast, nn.broadcast),
        length=cfg.num_layers,
    )(cfg, name="layers")
    layer_caches = None if cache is None else (cache.k, cache.v)
    x, new_caches = layers(x, layer_caches, cos, sin, attention_mask,
                           cache_index)
    final_norm = self.param("final_norm", nn.initializers.ones,
                            (cfg.hidden_size,), pdtype)
    hidden = rms_norm(x, final_norm, cfg.rms_norm_eps)
    new_cache = None if cache is None else KVCache(*new_caches)
    return hidden, new_cache


def init_params(config: ModelConfig, key: jax.Array) -> dict:
  """Random params (normal, std 0.02; norms 1; biases 0) in the tree above."""
  tokens = jnp.zeros((1, 1), jnp.int32)
  mask = jnp.ones((1, 1, 1), bool)

  @jax.jit
  def init(key):
    return Decoder(config).init(key, tokens, tokens, mask, None, 0)["params"]

  return flax.core.unfreeze(init(key))


def _check_inputs(config, tokens, positions, attention_mask, cache):
  if tokens.ndim != 2:
    raise ValueError(f"tokens must be [B, S] (rank 2); got {tokens.shape}.")
  if positions.shape != tokens.shape:
    raise ValueError(
        f"positions must match tokens {tokens.shape}; got {positions.shape}.")
  b, s = tokens.shape
  if cache is None:
    length = s
  else:
    expected = (config.num_layers, b)
    if cache.k.shape[:2] != expected or cache.k.shape != cache.v.shape:
      raise ValueError(
          f"cache.k/cache.v must be [layers={config.num_layers}, B={b}, L, "
          f"K, hd] and equal; got {cache.k.shape} and {cache.v.shape}.")
    length = cache.k.shape[2]
  if attention_mask.shape != (b, s, length):
    raise ValueError(
        f"attention_mask must be [B, S, L] = {(b, s, length)} (L = S without a"
        f" cache, the cache length with one); got {attention_mask.shape}.")


def forward(params, config: ModelConfig, tokens, positions, attention_mask, *,
            cache: Optional[KVCache] = None, cache_index=0):
  """Hidden states after the final norm (not logits), and the updated cache.

  Args:
    params: the tree documented in this module.
    config: the model's ModelConfig.
    tokens: [B, S] int32.
    positions: [B, S] int32 RoPE positions (per row; see positions_from_mask).
    attention_mask: [B, S, L] bool, True where query s may see key slot l.
      Without a cache L == S (see causal_attention_mask).
    cache: optional KVCache, each [Lyr, B, L, K, hd]. The S new keys/values
      are written at slots [cache_index, cache_index + S) before attending.
    cache_index: int or traced int32 scalar. lax.dynamic_update_slice clamps
      it to L - S, so callers must keep cache_index + S <= L.

  Returns:
    (hidden [B, S, D] in config.dtype, new KVCache or None without a cache).
  """
  _check_inputs(config, tokens, positions, attention_mask, cache)
  return Decoder(config).apply(
      {"params": params}, tokens, positions, attention_mask.astype(bool),
      cache, cache_index)


def _check_shared_inputs(prompt, completion, group_size):
  (tokens_p, positions_p, mask_p), (tokens_c, positions_c, mask_c) = (
      prompt, completion)
  for name, tokens, positions in (("prompt", tokens_p, positions_p),
                                  ("completion", tokens_c, positions_c)):
    if tokens.ndim != 2 or positions.shape != tokens.shape:
      raise ValueError(
          f"{name} tokens and positions must both be [rows, S]; got "
          f"{tokens.shape} and {positions.shape}.")
  (p, sp), (n, sc) = tokens_p.shape, tokens_c.shape
  if group_size < 1 or n != p * group_size:
    raise ValueError(
        f"completion rows ({n}) must be prompt rows ({p}) x group_size "
        f"({group_size}).")
  length = sp + sc
  for name, mask, expected in (("prompt", mask_p, (p, sp, length)),
                               ("completion", mask_c, (n, sc, length))):
    if mask.shape != expected:
      raise ValueError(
          f"the {name} attention_mask must be [rows, S, Sp + Sc] = "
          f"{expected}; got {mask.shape}.")


def forward_shared_prompts(params, config: ModelConfig, prompt, completion, *,
                           group_size: int):
  """`forward` over P prompts and the P*G completions that follow them, in
  one scan over the layers.

  At each layer the prompts run first; their keys and values, repeated G
  times, fill the completions' cache slots [0, Sp), and the completions
  write theirs at [Sp, L) and attend over all L. One scan keeps one stacked
  gradient of the layer weights and slices each layer's weights once (two
  forwards, one per part, kept a stack each and summed them: on SmolLM2 the
  trainer's 1 x 8 update took 1.89 GB of temporaries against 1.41 GB).

  Args:
    params: the tree documented in this module.
    config: the model's ModelConfig.
    prompt: (tokens [P, Sp], positions [P, Sp], attention_mask [P, Sp, L]).
    completion: (tokens [P*G, Sc], positions, attention_mask [P*G, Sc, L]),
      rows in consecutive blocks of G per prompt; L = Sp + Sc.
    group_size: G.

  Returns:
    (hidden of the prompts [P, Sp, D], of the completions [P*G, Sc, D]).
  """
  cfg = config
  _check_shared_inputs(prompt, completion, group_size)
  (tokens_p, positions_p, mask_p), (tokens_c, positions_c, mask_c) = (
      prompt, completion)
  sp, length = tokens_p.shape[1], mask_c.shape[-1]
  mask_p, mask_c = mask_p.astype(bool), mask_c.astype(bool)
  embed = lambda tokens: embed_tokens(params["embed"], tokens,
                                      cfg.compute_dtype)
  rope = lambda positions: rope_cos_sin(positions, cfg.head_dim,
                                        cfg.rope_theta)
  cos_p, sin_p = rope(positions_p)
  cos_c, sin_c = rope(positions_c)
  empty = jnp.zeros((tokens_p.shape[0], length, cfg.num_kv_heads,
                     cfg.head_dim), cfg.compute_dtype)

  def layer(carry, weights):
    x_p, x_c = carry
    block = lambda *args: Block(cfg).apply({"params": weights}, *args)
    x_p, (k, v) = block(x_p, (empty, empty), cos_p, sin_p, mask_p, 0)
    repeated = (jnp.repeat(k, group_size, axis=0),
                jnp.repeat(v, group_size, axis=0))
    x_c, _ = block(x_c, repeated, cos_c, sin_c, mask_c, sp)
    return (x_p, x_c), None

  if cfg.remat:  # the backward pass keeps each layer's inputs alone
    # prevent_cse=False, as in `Decoder`.
    layer = jax.checkpoint(layer, prevent_cse=False)
  (x_p, x_c), _ = jax.lax.scan(layer, (embed(tokens_p), embed(tokens_c)),
                               params["layers"])
  norm = lambda x: rms_norm(x, params["final_norm"], cfg.rms_norm_eps)
  return norm(x_p), norm(x_c)


def unembedding(params, config: ModelConfig) -> jnp.ndarray:
  """The output matrix [D, V]: the tied embedding transposed, or lm_head.

  Kept in the params' dtype: over float32 master weights the logits of a
  bf16 model are a float32 matmul in the sampler and the trainer alike
  (XLA's CPU runtime also lacks a bf16 x bf16 -> f32 dot inside the decode
  loop).
  """
  if config.tie_word_embeddings:
    return params["embed"].T
  return params["lm_head"]


def logits(params, config: ModelConfig, hidden) -> jnp.ndarray:
  """hidden [..., D] -> float32 logits [..., V] (meant for a few positions)."""
  w = unembedding(params, config).astype(config.compute_dtype)
  return jnp.matmul(hidden.astype(config.compute_dtype), w,
                    preferred_element_type=jnp.float32)
