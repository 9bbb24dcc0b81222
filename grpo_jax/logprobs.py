"""Per-token log-probs and entropy from hidden states, without [N, T, V] logits.

The policy model returns hidden states; the trainer needs, for every completion
token, the log-probability of the sampled token and the entropy of the tempered
next-token distribution:

    z      = (h @ W) / temperature                       [V] per position
    logp   = z[target] - logsumexp(z)
    entropy = -sum_v softmax(z)_v * log softmax(z)_v

A naive implementation materialises the [N, T, V] float32 logits (12.9 GB for
64 x 1024 tokens of a 49152-word vocabulary), and autodiff keeps them, or the
softmax, for the backward pass. `token_logprobs` instead walks over chunks of
positions (all N rows by a few columns of T) with a custom VJP: the forward
pass keeps only the per-position logsumexp and entropy, and the backward pass
recomputes one [N, C, V] logits block at a time (one extra matmul, the price
of not storing them), turns it into the logit gradient in a single fused
elementwise pass, and accumulates the gradients of the hidden states and of
the unembedding.

The sampler computes logits for one position at a time and must score them
exactly as the trainer does (PITFALLS: temperature on one side only): it
takes the same products with float32 accumulation (`project_logits`; the
sampler's `decoding.decode_logits` computes them vocabulary-major) and the
same float32 rounding, ``(z - max) - log(sum(exp(z - max)))``. `tempered_log_softmax` is that formula over a whole [..., V] array
(the naive reference of the tests and the loss benchmark).

Temperature is one number or one per row (``[N]``, the sampler's per-row
temperatures, broadcast as ``[N, 1, 1]`` over a chunk's ``[N, C, V]`` logits).
A row temperature of 0 marks a greedy row of the sampler; its tokens are
scored at temperature 1, as the sampler records them (`scoring_temperature`),
so the trainer passes the sampler's temperatures unchanged. Temperature is an
operand, not a static argument: changing it never recompiles, and no gradient
flows to it.
"""

from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

# Bytes of float32 logits one chunk may hold: few chunks keep an accelerator
# busy between the while-loop iterations. On CPU (2-core AMD EPYC, freed
# memory kept by `allocator`) the loss benchmark's 64 x 1024 pass took 91 /
# 88 / 82 / 79 / 80 / 87 s at 128 / 256 / 512 / 1024 / 2048 / 4096
# positions of V = 49152 a chunk (24 to 768 MiB): 192 MiB is the fastest.
CPU_CHUNK_BYTES = 192 * 2**20
ACCELERATOR_CHUNK_BYTES = 512 * 2**20


class TokenLogprobs(NamedTuple):
  """Per-token results of `token_logprobs`, both float32 [N, T]."""
  logp: jnp.ndarray
  entropy: jnp.ndarray


class TopKLogprobs(NamedTuple):
  """`token_logprobs` with ``topk_ids``: logp, entropy [N, T] and the
  log-probs of the given ids, topk_logp [N, T, K], all float32."""
  logp: jnp.ndarray
  entropy: jnp.ndarray
  topk_logp: jnp.ndarray


def project_logits(hidden, unembedding):
  """Logits ``hidden @ unembedding`` accumulated in float32.

  bf16 operands are multiplied exactly and summed in float32, so the sampler
  and the trainer see the same logits whatever the parameter dtype.

  Args:
    hidden: [..., D] hidden states.
    unembedding: [D, V] output projection (the transposed embedding when tied).

  Returns:
    [..., V] float32 logits.
  """
  with jax.named_scope("logits"):
    return lax.dot_general(
        hidden, unembedding,
        (((hidden.ndim - 1,), (0,)), ((), ())),
        preferred_element_type=jnp.float32)


def scoring_temperature(temperature):
  """The temperature a row's tokens are scored at: ``tau``, or 1 where ``tau = 0``.

  The sampler decodes a row of temperature 0 greedily (argmax) and records its
  tokens' log-probs at temperature 1 (a point mass has no useful log-prob);
  `token_logprobs` applies the same rule, so both sides agree row by row.

  Args:
    temperature: [N] (or [], or any shape) float32, >= 0.

  Returns:
    float32 array of the same shape, > 0.
  """
  temperature = jnp.asarray(temperature, jnp.float32)
  return jnp.where(temperature > 0, temperature, jnp.float32(1.0))


def tempered_log_softmax(logits, temperature=1.0):
  """``log softmax(logits / tau)`` in float32 over the last axis.

  The sampler draws from this distribution and `token_logprobs` scores with it;
  using the same temperature on both sides keeps the importance ratio at 1 for
  an unchanged policy. ``tau`` is `scoring_temperature(temperature)`.

  Args:
    logits: [N, ..., V] logits, any float dtype.
    temperature: >= 0; a Python float or a [] array (every row), or [N] (row n
      of logits at temperature[n]); traced values are checked for shape only.

  Returns:
    [N, ..., V] float32 log-probabilities.
  """
  num_rows = logits.shape[0] if logits.ndim > 1 else None
  temperature = _row_temperatures(temperature, num_rows)
  # [N] -> [N, 1, ..., 1] against [N, ..., V]; a scalar broadcasts as it is.
  if temperature.ndim:
    temperature = temperature.reshape(
        temperature.shape + (1,) * (logits.ndim - 1))
  return jax.nn.log_softmax(logits.astype(jnp.float32) / temperature, axis=-1)


def topk_logprobs(logits, temperature, k: int):
  """The K most likely ids of each row's full tempered distribution and
  their log-probs: ([N, K] int32, [N, K] float32) from [N, V] logits; the
  sampler records them at each step (``sample(..., record_topk=K)``).

  The distribution is the one ``tempered_logprobs`` scores
  (``log_softmax(z / tau)``, greedy rows at tau = 1, before any top-k /
  top-p truncation), rounded as `token_logprobs` rounds:
  ``(z_k - max) - log sum exp(z - max)``.
  """
  scaled = logits / scoring_temperature(temperature)[:, None]
  shifted = scaled - scaled.max(axis=-1, keepdims=True)
  log_total = jnp.log(softmax_sums(shifted)[0])
  values, ids = jax.lax.top_k(shifted, k)
  return ids.astype(jnp.int32), values - log_total[:, None]


def softmax_sums(shifted):
  """(sum_v exp(s_v), sum_v exp(s_v) * s_v) over the last axis of shifted
  logits ``s = z - max z``: the normaliser and the entropy's sum.

  One variadic reduce reads `shifted` once for both sums; as two `.sum`s,
  XLA:CPU wrote the logits out and read them in separate passes (the 4 x 8
  update ran 1.1x faster this way). The sampler and the trainer both sum
  with it, so they round alike.
  """
  weights = jnp.exp(shifted)
  zero = jnp.zeros((), shifted.dtype)
  return lax.reduce((weights, weights * shifted), (zero, zero),
                    lambda a, b: (a[0] + b[0], a[1] + b[1]),
                    (shifted.ndim - 1,))


def default_chunk_size(vocab_size: int, backend: Optional[str] = None) -> int:
  """Positions per chunk so that one chunk of float32 logits fits the budget.

  `token_logprobs` rounds it down to whole columns of N rows (at least one),
  so a chunk holds at most this many positions unless N alone is larger.

  Args:
    vocab_size: V.
    backend: ``'cpu'``, ``'gpu'``, ``'tpu'``; defaults to JAX's backend.

  Returns:
    A positive int: a multiple of 128 on accelerators (MXU/tensor-core tiles),
    of 8 on CPU.
  """
  backend = backend or jax.default_backend()
  on_cpu = backend == "cpu"
  budget = CPU_CHUNK_BYTES if on_cpu else ACCELERATOR_CHUNK_BYTES
  multiple = 8 if on_cpu else 128
  rows = budget // (4 * vocab_size)
  return max(multiple, rows // multiple * multiple)


def token_logprobs(hidden, unembedding, targets, *, temperature=1.0,
                   chunk_size: Optional[int] = None, topk_ids=None):
  """Log-probs of `targets` and entropies under ``softmax(h @ W / tau_n)``.

      z_{nt}    = hidden[n, t] @ unembedding / tau_n
      logp_{nt} = z_{nt}[targets[n, t]] - logsumexp(z_{nt})
      H_{nt}    = -sum_v p_v log p_v,   p = softmax(z_{nt})

  All softmax arithmetic is float32 (bf16 operands are multiplied with float32
  accumulation); the [N, T, V] logits never exist, in the forward or the
  backward pass: positions are processed in chunks of all N rows by
  ``max(1, chunk_size // N)`` columns, and the backward pass recomputes each
  chunk's logits once. A last chunk that does not fill up is shifted back to
  overlap its predecessor, so nothing is padded or copied. Keeping every row
  in every chunk keeps the row axis whole, so on a mesh whose devices split
  the rows each device computes only its own.

  Gradients flow to `hidden` and `unembedding` from both outputs; the entropy
  gradient ``dH/dz_v = -p_v (log p_v + H)`` is exact (apply
  `jax.lax.stop_gradient` to the entropy to use it as a diagnostic only). The
  gradient matmuls run in the inputs' dtype with float32 accumulation, and the
  gradients come back in the inputs' dtypes. Targets outside [0, V) give NaN.

  Args:
    hidden: [N, T, D] final hidden states (after the final norm) at the
      positions that predict `targets`.
    unembedding: [D, V] output projection.
    targets: [N, T] integer token ids.
    temperature: the sampler's temperature, >= 0: a Python float or []
      array for every row, or [N] per row (may be traced under jit; values
      are checked when concrete). Row n is scored at ``tau_n =
      scoring_temperature(temperature)[n]``: a greedy row (0) at 1, as the
      sampler records it. Or [N, T] per token (HAPO's entropy-adaptive
      sampler records the temperature each token was drawn at): token
      (n, t) is scored at its own. No gradient flows to it.
    chunk_size: positions (of the N*T) per chunk, rounded down to whole
      columns of N and at least one column; None picks
      `default_chunk_size(V)` for the current backend.
    topk_ids: None, or [N, T, K] integer ids (the sampler's top-K,
      DPPO's top-K forms): their log-probs ``z_k - logsumexp(z)`` are
      gathered from each chunk's logits (K columns, never [N, T, V]), with
      the exact gradient ``onehot(id_k) - p``; ids outside [0, V) give NaN.

  Returns:
    TokenLogprobs(logp [N, T] float32, entropy [N, T] float32); with
    `topk_ids`, TopKLogprobs(logp, entropy, topk_logp [N, T, K] float32).
  """
  _check_inputs(hidden, unembedding, targets)
  n, t, _ = hidden.shape
  # One code path: every temperature becomes [N] rows here, or stays [N, T]
  # per token (HAPO's adaptive sampler), sliced per chunk like `targets`.
  if np.ndim(temperature) == 2:
    check_temperature(temperature, n, num_columns=t)
    temperature = scoring_temperature(temperature)
  else:
    temperature = jnp.broadcast_to(_row_temperatures(temperature, n), (n,))
  vocab_size = unembedding.shape[1]
  if chunk_size is None:
    chunk_size = default_chunk_size(vocab_size)
  if (isinstance(chunk_size, bool)
      or not isinstance(chunk_size, (int, np.integer)) or chunk_size < 1):
    raise ValueError(
        f"chunk_size must be a positive int (positions per chunk) or None; "
        f"got {chunk_size!r}.")
  if topk_ids is not None:
    _check_topk_ids(topk_ids, (n, t))
  if n * t == 0:
    empty = jnp.zeros((n, t), jnp.float32)
    if topk_ids is not None:
      return TopKLogprobs(empty, empty,
                          jnp.zeros(topk_ids.shape, jnp.float32))
    return TokenLogprobs(empty, empty)
  # Chunks are all N rows by some columns: on a mesh the rows stay split, so
  # each device works on its own rows in every chunk.
  columns = max(1, min(int(chunk_size) // n, t))
  with jax.named_scope("logits"):  # profiles file the head under it
    if topk_ids is not None:
      return TopKLogprobs(*_logprobs_topk(
          hidden, unembedding, targets.astype(jnp.int32), temperature,
          topk_ids.astype(jnp.int32), columns))
    logp, entropy = _logprobs(hidden, unembedding,
                              targets.astype(jnp.int32), temperature, columns)
  return TokenLogprobs(logp, entropy)


def _check_inputs(hidden, unembedding, targets) -> None:
  if getattr(hidden, "ndim", None) != 3:
    raise ValueError(
        f"hidden must be [N, T, D] (rank 3); got shape "
        f"{getattr(hidden, 'shape', type(hidden))}. Reshape flat rows to "
        "[1, R, D].")
  if getattr(unembedding, "ndim", None) != 2:
    raise ValueError(
        f"unembedding must be [D, V] (rank 2); got shape "
        f"{getattr(unembedding, 'shape', type(unembedding))}.")
  if getattr(targets, "ndim", None) != 2:
    raise ValueError(
        f"targets must be [N, T] (rank 2); got shape "
        f"{getattr(targets, 'shape', type(targets))}.")
  for name, x in (("hidden", hidden), ("unembedding", unembedding)):
    if not jnp.issubdtype(x.dtype, jnp.floating):
      raise ValueError(f"{name} must be a float array; got dtype {x.dtype}.")
  if not jnp.issubdtype(targets.dtype, jnp.integer):
    raise ValueError(
        f"targets must be integer token ids; got dtype {targets.dtype}.")
  if hidden.shape[2] != unembedding.shape[0]:
    raise ValueError(
        f"unembedding must be [D, V] with D = hidden.shape[-1] = "
        f"{hidden.shape[2]}; got shape {unembedding.shape}. Pass the embedding "
        "table transposed ([V, D] -> [D, V]) for tied embeddings.")
  if targets.shape != hidden.shape[:2]:
    raise ValueError(
        f"targets must be [N, T] = {hidden.shape[:2]} (hidden's leading "
        f"axes); got shape {targets.shape}.")


def _check_topk_ids(topk_ids, shape) -> None:
  if (getattr(topk_ids, "ndim", None) != 3 or topk_ids.shape[:2] != shape
      or not jnp.issubdtype(topk_ids.dtype, jnp.integer)):
    raise ValueError(
        f"topk_ids must be integer ids [N, T, K] with [N, T] = {shape}; got "
        f"{getattr(topk_ids, 'dtype', type(topk_ids))} of shape "
        f"{getattr(topk_ids, 'shape', None)}.")


def check_temperature(temperature, num_rows: Optional[int],
                      num_columns: Optional[int] = None) -> None:
  """ValueError naming `temperature` unless it is a float or [N] (or [N, T]
  where `num_columns` T is given), all >= 0.

  The sampler and `token_logprobs` share this check. Values are checked where
  they are known: a Python float is, even under jit; a traced array is not.

  Args:
    temperature: a float, a [] array, or [N] (one per row); 0 marks a greedy
      row. [N, T] (one per token) where `num_columns` is given.
    num_rows: N.
    num_columns: T, for callers that take per-token temperatures.
  """
  shape = np.shape(temperature)
  if num_columns is not None and len(shape) == 2:
    if shape != (num_rows, num_columns):
      raise ValueError(
          f"a per-token temperature must be [N, T] = [{num_rows}, "
          f"{num_columns}] (one per token); got shape {shape}.")
  elif len(shape) > 1 or (len(shape) == 1 and shape[0] != num_rows):
    raise ValueError(
        f"temperature must be a scalar or [N] = [{num_rows}] (one per row); "
        f"got shape {shape}.")
  # Read the input itself: jnp.asarray would stage a Python float out as a
  # tracer under jit.
  if not isinstance(temperature, jax.core.Tracer):
    try:
      values = np.asarray(temperature, np.float64)
    except (TypeError, ValueError):
      values = np.array(np.nan)  # not a number: the error below
    if not (np.isfinite(values).all() and (values >= 0).all()):
      raise ValueError(
          f"temperature must be finite and >= 0 (0: a greedy row, scored at "
          f"1); got {temperature!r}.")


def _row_temperatures(temperature, num_rows: Optional[int]):
  """`check_temperature`, then the float32 `scoring_temperature` ([] or [N])."""
  check_temperature(temperature, num_rows)
  return scoring_temperature(temperature)


def _chunk_temperature(temperature, start, chunk: int):
  """[N] row temperatures as they are; of [N, T] per-token ones, the
  chunk's columns [N, C]."""
  if temperature.ndim == 1:
    return temperature
  return _columns(temperature, start, chunk)


def _temper(logits, temperature):
  """[N, C, V] logits / [N] row temperatures (or a chunk's [N, C] per-token
  ones).

  The sampler writes the same ``z / tau[:, None]``, so both round alike (XLA
  turns either into ``z * (1 / tau)``); ``z / 1`` is exact.
  """
  if temperature.ndim == 2:
    return logits / temperature[..., None]
  return logits / temperature[:, None, None]


def _chunk_start(i, chunk: int, length: int):
  # The last chunk ends at `length`, overlapping its predecessor instead of
  # reading past the end.
  return jnp.minimum(i * chunk, length - chunk)


def _num_chunks(chunk: int, length: int) -> int:
  return -(-length // chunk)


def _columns(x, start, chunk: int):
  """Columns [start, start + chunk) of an [N, T, ...] array."""
  return lax.dynamic_slice_in_dim(x, start, chunk, axis=1)


def _chunk_forward(hidden, unembedding, targets, temperature, topk_ids=None):
  """(logp, logsumexp, entropy), each [N, C], for one chunk of columns; with
  `topk_ids` [N, C, K] also the [N, C, K] log-probs of those ids."""
  logits = project_logits(hidden, unembedding)
  z = _temper(logits, temperature)
  # max(z / tau) = max(z) / tau exactly (tau > 0, rounding is monotone); from
  # the raw logits, XLA need not write z / tau out for the max alone.
  z_max = lax.stop_gradient(
      _temper(logits.max(axis=-1, keepdims=True), temperature))
  shifted = z - z_max
  total, weighted = softmax_sums(shifted)
  log_total = jnp.log(total)
  # Same rounding as jax.nn.log_softmax: (z - max) - log(sum(exp(z - max))).
  z_target = jnp.take_along_axis(z, targets[..., None], axis=-1,
                                 mode="clip")[..., 0]
  # Out-of-range targets (-100 label padding included) read NaN instead of a
  # silent clamp or wrap-around.
  valid = (targets >= 0) & (targets < z.shape[-1])
  logp = jnp.where(valid, (z_target - z_max[..., 0]) - log_total, jnp.nan)
  entropy = log_total - weighted / total
  out = (logp, z_max[..., 0] + log_total, entropy)
  if topk_ids is None:
    return out
  # `topk_logprobs`'s rounding (the sampler's): (z_k - max) - log sum.
  z_k = jnp.take_along_axis(z, topk_ids, axis=-1, mode="clip")
  in_range = (topk_ids >= 0) & (topk_ids < z.shape[-1])
  return out + (jnp.where(in_range, (z_k - z_max) - log_total[..., None],
                          jnp.nan),)


def _forward_columns(temperature, chunk, hidden, unembedding, targets,
                     topk_ids=None):
  """temperature: [N] row temperatures; chunk: static columns per chunk;
  topk_ids: None, or [N, T, K] ids whose log-probs come fourth."""
  n, t = targets.shape

  def body(i, buffers):
    start = _chunk_start(i, chunk, t)
    ids = None if topk_ids is None else _columns(topk_ids, start, chunk)
    results = _chunk_forward(_columns(hidden, start, chunk), unembedding,
                             _columns(targets, start, chunk),
                             _chunk_temperature(temperature, start, chunk),
                             ids)
    return tuple(lax.dynamic_update_slice_in_dim(buffer, result, start, 1)
                 for buffer, result in zip(buffers, results))

  zeros = jnp.zeros((n, t), jnp.float32)
  buffers = (zeros,) * 3
  if topk_ids is not None:
    buffers += (jnp.zeros(topk_ids.shape, jnp.float32),)
  return lax.fori_loop(0, _num_chunks(chunk, t), body, buffers)


def _logprobs_fwd(hidden, unembedding, targets, temperature, chunk):
  logp, lse, entropy = _forward_columns(temperature, chunk, hidden,
                                        unembedding, targets)
  return (logp, entropy), (hidden, unembedding, targets, temperature, lse,
                           entropy)


def _logprobs_bwd(chunk, residuals, cotangents, topk=None):
  """topk: None, or (ids [N, T, K], their log-probs' cotangent [N, T, K])."""
  hidden, unembedding, targets, temperature, lse, entropy = residuals
  g_logp, g_entropy = cotangents
  n, t, _ = hidden.shape
  vocab = unembedding.shape[1]
  compute_dtype = jnp.result_type(hidden.dtype, unembedding.dtype)

  def body(i, carry):
    d_hidden, d_unembedding = carry
    start = _chunk_start(i, chunk, t)
    take = lambda x: _columns(x, start, chunk)
    h = take(hidden)
    # Columns an overlapping last chunk shares with its predecessor were
    # already handled: they must add nothing to the unembedding gradient.
    fresh = (start + jnp.arange(chunk) >= i * chunk)[None, :]  # [1, C]
    g_lp = jnp.where(fresh, take(g_logp), 0.0)[..., None]
    g_h = jnp.where(fresh, take(g_entropy), 0.0)[..., None]
    tau = _chunk_temperature(temperature, start, chunk)
    z = _temper(project_logits(h, unembedding), tau)
    log_p = z - take(lse)[..., None]
    p = jnp.exp(log_p)
    is_target = (lax.broadcasted_iota(jnp.int32, (n, chunk, vocab), 2)
                 == take(targets)[..., None])
    # d logp / dz = onehot - p;  d H / dz = -p (log p + H).
    d_z = (jnp.where(is_target, g_lp, 0.0)
           - p * (g_lp + g_h * (log_p + take(entropy)[..., None])))
    if topk is not None:
      # d logp_k / dz = onehot(id_k) - p, summed over the K ids.
      ids, g_topk = take(topk[0]), jnp.where(fresh[..., None],
                                             take(topk[1]), 0.0)
      d_z = d_z - p * g_topk.sum(axis=-1, keepdims=True)
      d_z = d_z.at[jnp.arange(n)[:, None, None],
                   jnp.arange(chunk)[None, :, None], ids].add(
                       g_topk, mode="drop")
    d_logits = _temper(d_z, tau).astype(compute_dtype)
    d_h = lax.dot_general(d_logits, unembedding, (((2,), (1,)), ((), ())),
                          preferred_element_type=jnp.float32)
    d_h = jnp.where(fresh[..., None], d_h.astype(hidden.dtype), take(d_hidden))
    d_hidden = lax.dynamic_update_slice_in_dim(d_hidden, d_h, start, 1)
    d_unembedding = d_unembedding + lax.dot_general(
        h, d_logits, (((0, 1), (0, 1)), ((), ())),
        preferred_element_type=jnp.float32)
    return d_hidden, d_unembedding

  init = (jnp.zeros(hidden.shape, hidden.dtype),
          jnp.zeros(unembedding.shape, jnp.float32))
  d_hidden, d_unembedding = lax.fori_loop(0, _num_chunks(chunk, t), body,
                                          init)
  # Temperature is a hyperparameter: no gradient flows to it.
  return (d_hidden, d_unembedding.astype(unembedding.dtype), None,
          jnp.zeros_like(temperature))


def _logprobs_impl(hidden, unembedding, targets, temperature, chunk):
  logp, _, entropy = _forward_columns(temperature, chunk, hidden, unembedding,
                                      targets)
  return logp, entropy


# Temperature ([N]) is an operand so that it may be traced; only the chunk
# width is static.
_logprobs = jax.custom_vjp(_logprobs_impl, nondiff_argnums=(4,))
_logprobs.defvjp(_logprobs_fwd, _logprobs_bwd)


def _topk_impl(hidden, unembedding, targets, temperature, topk_ids, chunk):
  logp, _, entropy, topk = _forward_columns(
      temperature, chunk, hidden, unembedding, targets, topk_ids)
  return logp, entropy, topk


def _topk_fwd(hidden, unembedding, targets, temperature, topk_ids, chunk):
  logp, lse, entropy, topk = _forward_columns(
      temperature, chunk, hidden, unembedding, targets, topk_ids)
  return (logp, entropy, topk), (hidden, unembedding, targets, temperature,
                                 lse, entropy, topk_ids)


def _topk_bwd(chunk, residuals, cotangents):
  *residuals, topk_ids = residuals
  g_logp, g_entropy, g_topk = cotangents
  grads = _logprobs_bwd(chunk, tuple(residuals), (g_logp, g_entropy),
                        topk=(topk_ids, g_topk))
  return grads + (None,)


# `_logprobs` with the log-probs of K given ids per position as a third
# output (`token_logprobs(..., topk_ids=)`); a separate function, so that
# the plain pass compiles exactly as before.
_logprobs_topk = jax.custom_vjp(_topk_impl, nondiff_argnums=(5,))
_logprobs_topk.defvjp(_topk_fwd, _topk_bwd)
