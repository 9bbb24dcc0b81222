"""The sampler's KV-cached forward passes: the prefill and the decode step.

`prefill` runs the scanned `models.forward` over the prompts and writes
their keys/values into a fresh cache. The decode step (`forward`) computes
the same blocks for one new token per row, with the layer loop unrolled
over per-layer weights and caches sliced once before the loop (a scan
inside the sampler's while loop would slice each layer's weights out of the
stacked arrays at every step; measured 1.3-1.5x faster at batch 1), and
keeps its activations feature-major, ``[D, N]``, against weights laid out
``[out, in]`` once per call (`weights` says why; 1.15x / 1.34x faster at
8 / 32 rows on SmolLM2-135M, level at 1); the logits of both passes come
vocabulary-major (`decode_logits`), from the tied embedding as it is. Tests
hold it to the uncached model, token for token (tests/test_sampling.py).
"""

import functools

import jax
import jax.numpy as jnp

from grpo_jax import models
from grpo_jax.runtime import sharding
from grpo_jax.models import transformer


def split_layers(tree, num_layers):
  """A tree stacked on a leading layer axis -> a tuple of per-layer trees."""
  return tuple(jax.tree.map(lambda x, i=i: x[i], tree)
               for i in range(num_layers))


def weights(params, config, *, fused=False):
  """Per-layer weights for `forward`, sliced and laid out once.

  Matrices become [out, in] (the [in, out] params transposed): the decode
  step keeps its activations feature-major, [D, N], and XLA's CPU dots run
  ``W [out, in] @ x [in, N]`` at 8-32 rows 1.3-1.9x faster than ``x [N, in]
  @ W [in, out]`` (`experiments/benchmarks/profile.py` has the breakdown).
  With `fused`, q/k/v become one matrix ``qkv`` and gate/up one ``gate_up``
  (their rows stacked): two dots instead of five per layer.
  """
  dtype = config.compute_dtype
  transpose = lambda w: w.astype(dtype).T
  out = []
  for layer in split_layers(params["layers"], config.num_layers):
    attn = {name: (transpose(w) if w.ndim == 2 else w)
            for name, w in layer["attn"].items()}
    mlp = {name: transpose(w) for name, w in layer["mlp"].items()}
    if fused:
      names = ("q", "k", "v")
      attn["qkv"] = jnp.concatenate([attn.pop(n) for n in names])
      if config.qkv_bias:
        attn["qkv_bias"] = jnp.concatenate(
            [attn.pop(f"{n}_bias") for n in names])
      mlp = dict(gate_up=jnp.concatenate([mlp["gate"], mlp["up"]]),
                 down=mlp["down"])
    out.append(dict(layer, attn=attn, mlp=mlp))
  return tuple(out)


def fuse_projections() -> bool:
  """Whether `weights` should stack q/k/v and gate/up (`fused`): on GPU and
  TPU, where a decode step is bound by its kernel count (an H200 at batch
  1: 532 -> 479 fused ops a step, 1.13x faster; level at 8 and 32 rows), but
  not on CPU, where the stacked dots ran slower, nor with heads split over
  a 'tensor' mesh axis, where the stacked rows would straddle devices."""
  mesh = jax.sharding.get_abstract_mesh()
  tensor = 1 if mesh.empty else mesh.shape.get("tensor", 1)
  return jax.default_backend() != "cpu" and tensor == 1


def _rope_columns(x, cos, sin):
  """`transformer.apply_rope` on [heads, hd, N] with cos, sin [hd, N]."""
  half = x.shape[1] // 2
  rotated = jnp.concatenate([-x[:, half:], x[:, :half]], axis=1)
  return x * cos[None].astype(x.dtype) + rotated * sin[None].astype(x.dtype)


def _write_cache(cache, key, value, cache_index):
  """Writes each row's new key/value ([heads, hd, N]) into its cache (keys
  [N, K, hd, L], values [N, K, L, hd]) at slot `cache_index`: one slot for
  every row (a scalar), in place; or one per row ([N], the engine's slots,
  each at its own position), scattered."""
  cache_k, cache_v = cache
  # [heads, hd, N] -> [N, heads, hd]: a key column / a value row per row.
  columns = lambda y: jnp.transpose(y, (2, 0, 1)).astype(cache_k.dtype)
  index = jnp.asarray(cache_index, jnp.int32)
  if index.ndim:
    rows = jnp.arange(index.shape[0])
    return (cache_k.at[rows, :, :, index].set(columns(key)),
            cache_v.at[rows, :, index, :].set(columns(value)))
  zero = jnp.int32(0)
  return (jax.lax.dynamic_update_slice(cache_k, columns(key)[..., None],
                                       (zero, zero, zero, index)),
          jax.lax.dynamic_update_slice(cache_v, columns(value)[:, :, None],
                                       (zero, zero, index, zero)))


# Jitted on its own so that the unrolled loop traces one layer, not 30: the
# other calls hit jax's trace cache (the sampler traced in 0.34-0.38 s
# instead of 0.48 s on SmolLM2); XLA inlines the calls, so the compiled
# float32 step has the same ops (bfloat16 rounds differently:
# experiments/benchmarks/NOTES.md, "What changed").
@functools.partial(jax.jit, static_argnums=0)
def _decode_layer(config, w, x, cache, cos, sin, attention_mask, cache_index):
  """`transformer.Block` for one new token per row, feature-major.

  Args:
    w: one layer of `weights`.
    x: [D, N] residual stream.
    cache: (keys [N, K, hd, L], values [N, K, L, hd]), the layouts the
      attention's batched dots read without a transposing copy of the whole
      cache each step; the new key/value goes to slot `cache_index` (a
      scalar, or [N]: one per row).
    cos, sin: [hd, N] rotary tables of each row's position.
    attention_mask: [N, L] bool.

  Returns:
    (x [D, N], new cache).
  """
  cfg = config
  h_, k_, hd, n = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, x.shape[1]
  attn = w["attn"]
  h = transformer.rms_norm(x, w["attn_norm"], cfg.rms_norm_eps, axis=0)

  def dense(name):
    y = attn[name] @ h
    if cfg.qkv_bias:
      y = y + attn[f"{name}_bias"][:, None].astype(y.dtype)
    return y

  if "qkv" in attn:  # `weights(fused=True)`: one dot, then the three parts
    q_rows, kv_rows = h_ * hd, k_ * hd
    rows = dict(zip("qkv", jnp.split(dense("qkv"),
                                     [q_rows, q_rows + kv_rows])))
  else:
    rows = {name: dense(name) for name in "qkv"}

  def project(name, heads):
    y = rows[name].reshape(heads, hd, n)
    if cfg.qk_norm and name != "v":
      y = transformer.rms_norm(y, attn[f"{name}_norm"], cfg.rms_norm_eps,
                               axis=1)
    return sharding.constrain(y, sharding.HEAD_COLUMNS)

  # The model's module names, so that profiles file these ops alike.
  with jax.named_scope("attn"):
    q, key, value = project("q", h_), project("k", k_), project("v", k_)
    q, key = _rope_columns(q, cos, sin), _rope_columns(key, cos, sin)
    cache = sharding.constrain(_write_cache(cache, key, value, cache_index),
                               sharding.DECODE_CACHE)
    keys, values = (c.astype(x.dtype) for c in cache)
    groups = h_ // k_
    # Rows lead in both dots, as in the cache: with the columns' [k, g, d,
    # n] order on either side, XLA transposed the whole cache at each step
    # instead of these small per-token arrays.
    q = jnp.transpose(q.reshape(k_, groups, hd, n), (3, 0, 1, 2))
    scores = jnp.einsum("nkgd,nkdl->nkgl", q, keys,
                        preferred_element_type=jnp.float32) * (hd ** -0.5)
    probs = transformer.masked_softmax(scores,
                                       attention_mask[:, None, None, :])
    out = jnp.einsum("nkgl,nkld->nkgd", probs.astype(x.dtype), values)
    out = jnp.transpose(out, (1, 2, 3, 0))
    x = x + attn["o"] @ out.reshape(h_ * hd, n)
  x = sharding.constrain(x, sharding.COLUMNS)
  mlp = w["mlp"]
  h = transformer.rms_norm(x, w["mlp_norm"], cfg.rms_norm_eps, axis=0)
  if "gate_up" in mlp:
    gate, up = jnp.split(mlp["gate_up"] @ h, 2)
  else:
    gate, up = mlp["gate"] @ h, mlp["up"] @ h
  hidden = sharding.constrain(transformer.swiglu(gate, up),
                              sharding.MLP_COLUMNS)
  x = sharding.constrain(x + mlp["down"] @ hidden, sharding.COLUMNS)
  return x, cache


def forward(params, layers, config, tokens, positions, attention_mask,
            caches, cache_index):
  """`models.forward` for one new token per row: same blocks and numerics,
  the layer loop unrolled over per-layer weights and caches (the module
  docstring says why), activations feature-major ([D, N]); each cache is
  updated in place.

  Args:
    params: the model params (embedding and final norm are read).
    layers: `weights(params, config)`.
    config: the ModelConfig.
    tokens: [N] int32.
    positions: [N] int32.
    attention_mask: [N, L] bool.
    caches: tuple over layers of (k [N, K, hd, L], v [N, K, L, hd]).
    cache_index: int32, the slot written: a scalar, or [N] one per row.

  Returns:
    (hidden [D, N], feature-major as `decode_logits` reads it; new caches).
  """
  x = transformer.embed_tokens(params["embed"], tokens[:, None],
                               config.compute_dtype)[:, 0].T
  x = sharding.constrain(x, sharding.COLUMNS)
  cos, sin = transformer.rope_cos_sin(positions[:, None], config.head_dim,
                                      config.rope_theta)
  cos, sin = cos[:, 0].T, sin[:, 0].T  # [hd, N]
  new_caches = []
  for layer, cache in zip(layers, caches):
    x, cache = _decode_layer(config, layer, x, cache, cos, sin,
                             attention_mask, cache_index)
    new_caches.append(cache)
  hidden = transformer.rms_norm(x, params["final_norm"], config.rms_norm_eps,
                                axis=0)
  return hidden, tuple(new_caches)


def output_rows(params, config):
  """The output projection vocabulary-major, [V, D], for `decode_logits`:
  the embedding itself when tied (no copy), else lm_head transposed once
  per sampling call (as `weights` lays out every other matrix). Kept in the
  params' dtype, as `models.unembedding`: the logits are a float32 matmul
  over float32 master weights in the sampler and the trainer alike."""
  if config.tie_word_embeddings:
    return params["embed"]
  return params["lm_head"].T


def decode_logits(hidden, rows):
  """[D, N] feature-major hidden states -> [N, V] float32 logits.

  Computed vocabulary-major, ``rows [V, D] @ hidden [D, N]``, then
  transposed: XLA:CPU runs that dot (a YNNPACK one) 1.3-1.6x faster at 8-32
  rows than ``hidden.T @ rows.T`` (a plain Eigen one), and the sampler
  5-7% faster at 8 and 32 rows. The barrier keeps XLA from folding the
  transpose back into the dot, which would bring back the slow form. The
  products are `logprobs.project_logits`'s (float32 accumulation), summed in
  XLA's order.
  """
  with jax.named_scope("logits"):
    logits = jax.lax.dot_general(rows, hidden, (((1,), (0,)), ((), ())),
                                 preferred_element_type=jnp.float32)
    return jax.lax.optimization_barrier(logits).T


def prefill(params, config, prompt_tokens, prompt_mask, prompt_slots, rows):
  """Writes the prompts into a fresh cache; returns (cache, next logits).

  Slot j of the cache holds prompt column j (then new token j - Sp).

  Args:
    prompt_tokens: [P, Sp] int32, left-padded.
    prompt_mask: [P, Sp] bool.
    prompt_slots: [P, L] bool, `prompt_mask` padded with False to L.
    rows: `output_rows(params, config)`.

  Returns:
    (models.KVCache, each [layers, P, L, K, hd]; logits [P, V] float32 of the
    token after each prompt).
  """
  num_prompts, prompt_length = prompt_tokens.shape
  cache_length = prompt_slots.shape[1]
  positions = models.positions_from_mask(prompt_mask)
  slots = jnp.arange(cache_length)[None, :]
  queries = jnp.arange(prompt_length)[:, None]
  # A padding query attends to itself only, so its (unused) cache entry stays
  # finite; real queries attend to real earlier slots.
  attention_mask = (((slots <= queries)[None] & prompt_slots[:, None, :])
                    | (slots == queries)[None])
  cache = models.init_cache(config, num_prompts, cache_length)
  hidden, cache = models.forward(params, config, prompt_tokens, positions,
                                 attention_mask, cache=cache, cache_index=0)
  return cache, decode_logits(hidden[:, -1].T, rows)
